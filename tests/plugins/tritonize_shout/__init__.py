"""A task package outside tritonize: an embedding taken `--loudness` times (2 by default) by a served post step of
its own (served/shout.py).

It is what the conformance kit and tests/unit/tasks/test_new_task.py register: everything a task is lives in this
folder, and tritonize finds it through the `tritonize.tasks` entry point of the distribution that carries it.
"""
