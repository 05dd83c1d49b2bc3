from podfleet.cli.main import main

main()
