"""The Python model step: the repository's ONNX graph run by onnxruntime inside a Python-backend model.

Served: Triton runs a byte-identical copy of this file as the step's
model.py, with batching.py beside it, in the fused variant, which the local
server runs without a native onnxruntime backend (the configuration
`configs/fused.pbtxt` selects it). In the container the same graph runs on Triton's onnxruntime backend.
Input and output names, the graph file, buckets, pad id and threading come
from the model configuration. Its inputs allow ragged batches, so one
execute() may receive requests padded to different lengths: rows are
regrouped by their real length and each group is padded only to its own
longest row.
"""

from __future__ import annotations

import os
import queue
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort

from .batching import (
    ATTENTION_MASK,
    costliest_first,
    length_groups,
    pad_rows,
    pad_value,
    parse_buckets,
    real_lengths,
)
from .stub import ServedStep

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests and the in-process benchmark use OnnxRunner
    pb_utils = None


# Real tokens below which a batch runs on the multi-threaded session even where shards exist: cut smaller,
# the pieces run at the small-batch cost of onnxruntime (all-MiniLM-L6-v2 on two cores, 16-token rows:
# 4 rows on two threads 899 rows/s, two single-threaded shards of 2 rows 751; at 16 rows the shards lead,
# 1198 against 1123).
PARALLEL_MIN_TOKENS = 256


class OnnxRunner:
    """onnxruntime sessions plus length-aware regrouping of rows.

    A lone row, or a batch of fewer than PARALLEL_MIN_TOKENS real tokens,
    runs on one session with `threads` intra-op threads (lowest latency at
    low load). A larger batch runs on `shards` single-threaded sessions in
    parallel: its length groups are cut into pieces, and each free session
    takes the costliest piece left. On a CPU that beats one session whose
    threads meet at a barrier after every operator. With several instances
    per step, each gets cores // instances shards, so busy instances do not
    oversubscribe the cores. shards=0 runs everything on the multi-threaded
    session.

    With `busy_session`, a run the caller marks busy (it follows the previous
    run at once: the fused step's worker knows) goes to a second
    multi-threaded session whose threads do not spin between operators:
    spinning threads would hold every core while Triton's threads and the
    client carry the previous batch's answers. It costs one more copy of the
    graph in memory.
    """

    def __init__(self, onnx_file: str, threads: int, buckets: list[int], pad_id: int,
                 allow_spinning: bool, max_rows: int, shards: int, per_token: tuple[str, ...] = (),
                 busy_session: bool = False):
        self.session = self._session(onnx_file, threads, allow_spinning)
        # A busy run follows the previous batch's answers, which Triton's threads and the client still carry;
        # threads spinning between its operators held the cores they needed (all-MiniLM-L6-v2, two cores,
        # 16-token texts at concurrency 4: p99 2.3-2.6 x p50 spinning, 1.5-1.7 x not; throughput within the noise,
        # 1-6% lower at concurrency 4 on longer rows, where the cores idle more between operators).
        # After an idle wait a run still spins: alone, a lone text is fastest on cores kept awake.
        spins = allow_spinning and threads > 1
        self.busy_session = self._session(onnx_file, threads, False) if busy_session and spins else self.session
        self.input_names = [i.name for i in self.session.get_inputs()]
        # Inputs other than token tensors ([rows, tokens]): each row's taken whole, never cut or padded to a length
        # (an image-and-text graph's pixels); batches whose rows differ in their shape run apart.
        self.whole = [i.name for i in self.session.get_inputs() if len(i.shape) != 2]
        self.output_names = [o.name for o in self.session.get_outputs()]
        # Outputs with one value per token ([rows, tokens, ...]), as the configuration declares them.
        self.per_token = [name in per_token for name in self.output_names]
        self.shards = [self._session(onnx_file, 1, allow_spinning) for _ in range(shards)]
        self.pool = ThreadPoolExecutor(shards, thread_name_prefix="onnx-shard") if shards > 1 else None
        self.buckets = sorted(buckets)
        self.pad_id = pad_id
        self.max_rows = max_rows

    @classmethod
    def from_config(cls, model_config: dict, version_dir: str, threads: int | None = None,
                    shards: int | None = None, busy_session: bool = False) -> OnnxRunner:
        """As the server configures it; `threads` and `shards` override the configuration (the benchmark's floor);
        `busy_session` for a caller that marks busy runs."""
        p = {k: v["string_value"] for k, v in model_config.get("parameters", {}).items()}
        cores = os.cpu_count() or 1
        instances = sum(int(g.get("count", 1)) for g in model_config.get("instance_group", [])) or 1
        if shards is None:
            # Batches: the cores shared between this step's instances, one single-threaded shard each.
            shards = max(1, cores // instances) if p.get("data_parallel", "1") == "1" else 0
        return cls(
            os.path.join(version_dir, p["onnx_file"]),
            threads or int(p.get("intra_op_threads", "0")) or cores,
            parse_buckets(p["buckets"]),
            int(p["pad_id"]),
            allow_spinning=p.get("allow_spinning", "1") == "1",
            max_rows=int(model_config.get("max_batch_size") or 1),
            shards=shards,
            # dims exclude the batch axis: a per-token output's first dim is the dynamic sequence (-1).
            per_token=tuple(o["name"] for o in model_config.get("output", []) if str((o.get("dims") or [0])[0]) == "-1"),
            busy_session=busy_session,
        )

    @staticmethod
    def _session(onnx_file: str, threads: int, allow_spinning: bool) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Spinning keeps the helper threads awake between the operators of one run (waking a sleeping
        # core for each operator cost ~0.6 ms per 16-token text); force_spinning_stop ends it with the run,
        # so no thread spins between requests on the cores Triton's own threads and the stubs need.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
        if allow_spinning:
            options.add_session_config_entry("session.force_spinning_stop", "1")
        return ort.InferenceSession(onnx_file, options, providers=["CPUExecutionProvider"])

    def run(self, feeds: dict[str, np.ndarray], session: ort.InferenceSession | None = None) -> list[np.ndarray]:
        """One padded batch, as onnxruntime sees it."""
        return (session or self.session).run(self.output_names, feeds)

    def _run_group(self, rows: dict[str, list[np.ndarray]], lengths: np.ndarray, group: np.ndarray, session) -> list[np.ndarray]:
        """One group padded to its own longest row."""
        width = int(lengths[group].max())
        feeds = {
            name: np.stack([rows[name][r] for r in group]) if name in self.whole else
            pad_rows([rows[name][r][: lengths[r]] for r in group], width, pad_value(name, self.pad_id))
            for name in self.input_names
        }
        return self.run(feeds, session)

    def _parallel(self, rows: dict[str, list[np.ndarray]], lengths: np.ndarray, pieces: list[np.ndarray]) -> list[tuple[np.ndarray, list[np.ndarray]]]:
        """Each piece taken by the next free shard, in the order given (costliest first)."""
        free: queue.SimpleQueue = queue.SimpleQueue()
        for s in self.shards:
            free.put(s)

        def work(piece: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
            session = free.get()
            try:
                return piece, self._run_group(rows, lengths, piece, session)
            finally:
                free.put(session)

        return list(self.pool.map(work, pieces))

    def _parallel_for(self, lengths: np.ndarray) -> bool:
        return self.pool is not None and len(lengths) > 1 and int(lengths.sum()) >= PARALLEL_MIN_TOKENS

    def plan(self, lengths: np.ndarray) -> list[np.ndarray]:
        """The row groups one execute() runs, each padded to its own longest row.

        The benchmark counts padding waste with this very plan.
        """
        groups = length_groups(lengths, np.argsort(lengths, kind="stable"), self.buckets, self.max_rows)
        return costliest_first(groups, lengths, len(self.shards)) if self._parallel_for(lengths) else groups

    def computed_tokens(self, lengths: np.ndarray) -> int:
        """Tokens the plan computes for rows of these real lengths: each group padded to its own longest row."""
        return sum(len(g) * int(lengths[g].max()) for g in self.plan(lengths))

    def run_or_regroup(self, feeds: dict[str, np.ndarray], plain: bool) -> tuple[list[np.ndarray], int]:
        """One request's outputs and the tokens computed for them: a plain run of the feeds as padded (the
        floor's arrival-order batches), or regrouped as the served step runs them."""
        if plain:
            return self.run(feeds), int(feeds[ATTENTION_MASK].size)
        return self.run_grouped([feeds])[0], self.computed_tokens(real_lengths(feeds))

    def run_grouped(self, batches: list[dict[str, np.ndarray]], busy: bool = False) -> list[list[np.ndarray]]:
        """Many requests' token tensors -> per request, one array per output, in request order; `busy`: the run
        follows the previous one at once (its multi-threaded part runs on the session that does not spin)."""
        kinds = {tuple(b[n].shape[1:] for n in self.whole) for b in batches}
        if len(kinds) > 1:  # rows of other shapes (images and texts) never share a run
            answers: list = [None] * len(batches)
            for kind in kinds:
                mine = [k for k, b in enumerate(batches) if tuple(b[n].shape[1:] for n in self.whole) == kind]
                for k, answer in zip(mine, self.run_grouped([batches[k] for k in mine], busy)):
                    answers[k] = answer
            return answers
        rows = {name: [r for b in batches for r in b[name]] for name in self.input_names}
        lengths = np.concatenate([real_lengths(b) for b in batches])
        pieces = self.plan(lengths)
        if self._parallel_for(lengths):
            done = self._parallel(rows, lengths, pieces)
        else:
            # One shard (an instance's share of the cores) takes its batches; with more, they run on every core.
            wide = self.busy_session if busy else self.session
            session = self.shards[0] if len(self.shards) == 1 and len(lengths) > 1 else wide
            done = [(g, self._run_group(rows, lengths, g, session)) for g in pieces]
        # Per-token outputs ([rows, tokens, ...]) come back padded with zeros to each request's own width,
        # as the container's onnxruntime backend returns them for the request's padded tensors.
        widths = [b[ATTENTION_MASK].shape[1] for b in batches]
        results: list[np.ndarray | None] = [None] * len(self.output_names)
        for group, outputs in done:
            for k, out in enumerate(outputs):
                if results[k] is None:
                    tail = ((max(widths),) + out.shape[2:]) if self.per_token[k] else out.shape[1:]
                    results[k] = np.zeros((len(lengths),) + tail, dtype=out.dtype)
                if self.per_token[k]:
                    results[k][group, : out.shape[1]] = out
                else:
                    results[k][group] = out
        per_request, offset = [], 0
        for b, width in zip(batches, widths):
            n = len(b[ATTENTION_MASK])
            per_request.append([res[offset : offset + n, :width] if tok else res[offset : offset + n]
                                for res, tok in zip(results, self.per_token)])
            offset += n
        return per_request


class TritonPythonModel(ServedStep):
    """Reads its tensors from the configuration and answers each request with every output of the graph."""

    def load(self, config: dict, version_dir: str, args: dict) -> None:
        self.runner = OnnxRunner.from_config(config, version_dir)
        self.input_names = [i["name"] for i in config["input"]]

    def execute(self, requests):
        batches = [
            {name: pb_utils.get_input_tensor_by_name(r, name).as_numpy() for name in self.input_names}
            for r in requests
        ]
        outputs = self.runner.run_grouped(batches)
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, arr) for name, arr in zip(self.runner.output_names, arrays)]
            )
            for arrays in outputs
        ]
