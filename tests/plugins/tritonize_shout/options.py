from tritonize.spec import TaskOption

OPTIONS = (
    TaskOption("loudness", "int | None", "shout: how many times each embedding is taken (default: 2)", parse=int,
               after="baseline"),
)
