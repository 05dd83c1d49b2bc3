"""Pure hardware models: chip specs, topologies, routing. Imports nothing else of podfleet
except the shared error hierarchy."""
