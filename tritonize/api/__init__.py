"""The HTTP front door: the routes retrieval stacks already call, over one gRPC channel to Triton.

One room, as text-embeddings-inference's router is: typed request and response models (schemas), the served
models read from the repository (catalog), Triton over gRPC (backend), the routes (routes), and the app that
holds them with its limits, key and metrics (app). It asks the tasks for names and never branches on task
strings: a route serves the task it names, and the catalog finds the model.
"""
