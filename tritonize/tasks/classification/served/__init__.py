"""Served modules of this task: imported as tritonize.serving.<name> (tritonize.tasks joins this folder to that
package when it registers the task), copied verbatim into the version folders of its Python steps."""
