"""Served modules of this task: imported as tritonize.serving.<name> once the task is registered."""
