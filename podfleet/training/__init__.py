"""The worker side of a real training job (PyTorch).

Importing this package does not import torch: ``config`` (WorkerConfig, Reporter,
WorkerResult) and ``worker`` (run_worker, main) are torch-free at import time, so
the control plane and the fabrics can use them. ``model``, ``data``, ``loop`` and
``helpers`` (the user entrypoint API: ``from podfleet.training import helpers as pf``)
import torch and run in worker processes.
"""
