"""layercake as a vLLM KV connector (the v1 connector API), loaded out of tree:

    kv_transfer_config={"kv_connector": "LayercakeConnector",
                        "kv_connector_module_path": "layercake.vllm",
                        "kv_role": "kv_producer" | "kv_consumer",
                        "kv_connector_extra_config": {...}}

P (kv_producer) runs a bootstrap server and one layercake Prefill rank in its
worker; D (kv_consumer) one Decode rank. A request is paired by its
`kv_transfer_params` (offline: SamplingParams(extra_args={"kv_transfer_params":
...})): P's carries {"layercake_room": N}, D's {"layercake_room": N,
"layercake_bootstrap": "host:port"} (P's bootstrap address). The same request
goes to P and D at once (examples/vllm/): D allocates the request's blocks
and grants them (update_state_after_alloc -> metadata -> worker ->
Receiver.send); P holds the request (get_num_new_matched_tokens returns None:
"ask again") until its room is bootstrapped, then adds the prompt's blocks as
one chunk in the step that completes the prefill and records one step per
attention layer in save_kv_layer, so each layer leaves while the next one
computes. P's blocks are freed only once D has every byte (request_finished
delays the free; get_finished reports the send). With load_mode "async", D's
request waits for its KV (vLLM's asynchronous load) and resumes when
get_finished reports it; with "per_layer" D schedules it at once
(synchronous load), grants its blocks before the forward and waits in
wait_for_layer_load for each layer on its own count (Receiver.layers_ready),
so D's forward runs behind P's. A failed room is reported through
get_block_ids_with_load_errors (and failed_recving for an asynchronous load):
vLLM fails the request or recomputes it (kv_load_failure_policy). An abort on either side cancels the room (the peer is told).

Extra config (kv_connector_extra_config), every wait has a deadline:
  bootstrap_host ("127.0.0.1"), bootstrap_port (0: any), bootstrap_file (P
  writes its bootstrap address there), listen_url (D's data plane,
  "tcp://127.0.0.1:0"), bootstrap_timeout_s (30: P's hold and D's wait for
  its room to bootstrap), transfer_timeout_s (120: a room that has not ended
  by then is cancelled), layerwise_interval (1; <= 0 whole-request), load_mode (D: "async" or
  "per_layer", see docs/vllm.md for the figures), layer_timeout_s (D's wait
  for one layer in per_layer mode, 30), knobs
  (a dict of layercake Context knobs, `layercake info --config`), timing_file
  (JSON lines: P's last layer record and D's "every byte landed" per room,
  P's save_kv_layer costs).

The KV tensors are registered as vLLM allocated them (register_kv_caches):
the storage under each tensor once, one layercake buffer per layer (or per K
and per V where the tensor's first axis is K/V), no copy. Supported: a
per-layer tensor whose block axis is outermost and whose blocks are
contiguous (the CPU backend's [blocks, kv_heads, block_size, 2*head_dim],
MLA's [blocks, block_size, dim]), and FlashAttention's [2, blocks, ...].
Anything else raises NotImplementedError naming the shape and strides.
"""
import os
import json
import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    KVConnectorWorkerMetadata,
)
from vllm.v1.request import RequestStatus

import layercake as lc

log = logging.getLogger("layercake.vllm")

ROOM_KEY = "layercake_room"
BOOTSTRAP_KEY = "layercake_bootstrap"
DEFAULT_LOAD_MODE = "async"
METADATA = b"vllm"  # D recomputes the last prompt token: no first token to carry


def _params(request):
    p = getattr(request, "kv_transfer_params", None)
    if p is None:
        sp = getattr(request, "sampling_params", None)
        extra = getattr(sp, "extra_args", None) or {}
        p = extra.get("kv_transfer_params")
    return p if isinstance(p, dict) and ROOM_KEY in p else None


# ---- scheduler -> worker, worker -> scheduler ------------------------------

@dataclass
class LayercakeMeta(KVConnectorMetadata):
    # P: rooms to open (req_id -> room), chunks of this step
    # (req_id -> (room, block ids of the prompt)), rooms to abort.
    open_rooms: dict = field(default_factory=dict)
    chunks: dict = field(default_factory=dict)
    # D: receives to start (req_id -> (bootstrap, room, block ids, prefix tokens)).
    receives: dict = field(default_factory=dict)
    aborts: dict = field(default_factory=dict)
    # D: req_id -> room, for requests whose first forward (after their KV
    # load) is this step (the timing of D's first token).
    first_compute: dict = field(default_factory=dict)


@dataclass
class LayercakeWorkerMeta(KVConnectorWorkerMetadata):
    # P: req_id -> how many TP ranks' rooms have bootstrapped since the
    # last report, or -1: one of them failed before bootstrap. Summed over
    # the ranks (vLLM's KVOutputAggregator calls aggregate); the scheduler
    # sends a request's KV once every rank's room is bootstrapped.
    bootstrapped: dict = field(default_factory=dict)

    def aggregate(self, other):
        out = LayercakeWorkerMeta(dict(self.bootstrapped))
        for k, v in other.bootstrapped.items():
            a = out.bootstrapped.get(k, 0)
            out.bootstrapped[k] = -1 if a < 0 or v < 0 else a + v
        return out


# ---- KV tensors as layercake buffers ----------------------------------------

def _one_span(t):
    """Whether t's elements fill one span of memory without a gap, in any
    order: t is a permutation of a contiguous tensor (FlashInfer's HND cache
    handed over as an NHD view). A block moves as bytes, so P and D built
    alike agree on its inside whatever the view's order."""
    dims = sorted((st, n) for st, n in zip(t.stride(), t.shape) if n != 1)
    want = 1
    for st, n in dims:
        if st != want:
            return False
        want *= n
    return True


def _rows(x, block_size, kv_split):
    """Tokens per page of a token-major block, by vLLM's logical shapes
    (the same on P and D whatever their head counts: with one head per rank
    memory alone cannot tell): FlashAttention's [blocks, block_size, heads,
    head_dim] after its K/V axis, MLA's [blocks, block_size, dim]; 0 for the
    CPU backend's head-major [blocks, heads, block_size, 2 * head_dim] (a
    rank's heads one slice of the page); None for anything else, such as
    FlashInfer's [blocks, 2, ...] (K and V inside each block, a rank's heads
    in two pieces), which TP cannot split."""
    if block_size is None:
        return 0
    d = x.dim()
    if (kv_split and d == 4) or d == 3:
        return block_size if x.shape[1] == block_size else None
    if d == 4 and not kv_split:
        return 0 if x.shape[2] == block_size else None
    return None


def describe_kv_caches(kv_caches, num_blocks=None, block_size=None):
    """[(layer_name, [(base, item_len, blocks, rows)...])], [(storage_ptr, nbytes,
    tensor)] for the tensors vLLM hands to register_kv_caches: one buffer
    per layer (two, K and V, for a leading K/V axis). A view whose blocks
    each fill one span, in whatever order of dimensions (a permuted HND
    view), is taken as it is. Never copies."""
    layers, storages = [], {}
    for name, t in kv_caches.items():
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            raise NotImplementedError(f"layer {name}: only CPU tensors so far (got {t.device})")
        st = t.untyped_storage()
        storages.setdefault(st.data_ptr(), (st.data_ptr(), st.nbytes(), t))
        es = t.element_size()
        parts = [t[0], t[1]] if t.dim() == 5 and t.shape[0] == 2 and (
            num_blocks is None or t.shape[1] == num_blocks) else [t]
        bufs = []
        for x in parts:
            blk = x.shape[0]
            inner = x[0]
            block_bytes = inner.numel() * es
            if not _one_span(inner) or x.stride(0) * es != block_bytes:
                raise NotImplementedError(
                    f"layer {name}: KV tensor shape {tuple(t.shape)} strides {t.stride()}: "
                    "layercake needs each block's bytes contiguous and blocks back to back")
            bufs.append((x.data_ptr(), block_bytes, blk, _rows(x, block_size, len(parts) == 2)))
        layers.append((name, bufs))
    return layers, list(storages.values())


def build_layout(layers, block_size):
    bufs = []
    for li, (_, parts) in enumerate(layers):
        kinds = [lc.BufferKind.K, lc.BufferKind.V] if len(parts) == 2 else [lc.BufferKind.OTHER]
        for (base, item, blocks, *rows), kind in zip(parts, kinds):
            r = rows[0] if rows else 0
            bufs.append(lc.Buffer(base, item * blocks, item, li, kind, 0, r or 0))
    return lc.Layout(bufs, page_size=block_size)


def _tp_of(vllm_config, x, role):
    """(TP size, this worker's TP rank): vLLM's parallel state, or
    kv_connector_extra_config's "tp_size" / "tp_rank" where given (a test
    driving several workers in one process). The scheduler side has no
    rank."""
    size = x.get("tp_size")
    if size is None:
        size = getattr(vllm_config.parallel_config, "tensor_parallel_size", 1) or 1
    rank = x.get("tp_rank")
    if rank is None:
        rank = 0
        if role != KVConnectorRole.SCHEDULER and int(size) > 1:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
            rank = get_tensor_model_parallel_rank()
    size, rank = int(size), int(rank)
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"layercake: TP rank {rank} of {size}")
    return size, rank


# ---- the connector ----------------------------------------------------------

class LayercakeConnector(KVConnectorBase_V1):

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        tc = vllm_config.kv_transfer_config
        self._producer = tc.kv_role == "kv_producer"
        if tc.kv_role not in ("kv_producer", "kv_consumer"):
            raise ValueError(f"layercake: kv_role {tc.kv_role!r}: kv_producer or kv_consumer")
        x = dict(tc.kv_connector_extra_config or {})
        self._x = x
        self._bootstrap_timeout = float(x.get("bootstrap_timeout_s", 30))
        self._transfer_timeout = float(x.get("transfer_timeout_s", 120))
        self._block_size = vllm_config.cache_config.block_size
        self._load_mode = str(x.get("load_mode", DEFAULT_LOAD_MODE))
        if self._load_mode not in ("async", "per_layer"):
            raise ValueError(f"layercake: load_mode {self._load_mode!r}: async or per_layer")
        self._per_layer = self._load_mode == "per_layer" and not self._producer
        self._layer_timeout = float(x.get("layer_timeout_s", 30))
        self._tp_size, self._tp_rank = _tp_of(vllm_config, x, role)
        self._lock = threading.Lock()
        if role == KVConnectorRole.SCHEDULER:
            self._sched_init()
        else:
            self._worker_init()

    # ================= scheduler side =================

    def _sched_init(self):
        self._reqs = {}          # req_id -> (room, bootstrap, Request)
        self._new_rooms = {}     # P: rooms to open in the worker
        self._ready = {}         # P: req_id -> True bootstrapped / False failed
        self._boot_count = {}    # P: req_id -> TP ranks bootstrapped so far
        self._pending_recv = {}  # D: req_id -> receive args for the next metadata
        self._aborts = {}        # req_id -> True: cancel, report when final; False: drop
        self._sent_chunk = set()  # P: req_ids whose chunk went out
        self._sending = set()    # P: finished, blocks held until the worker reports
        self._await_first = {}   # D: req_id -> room, KV granted, first forward not yet run

    def on_new_request(self, request):
        p = _params(request)
        if p is None:
            return
        room = int(p[ROOM_KEY])
        self._reqs[request.request_id] = (room, p.get(BOOTSTRAP_KEY), request)
        if self._producer:
            self._new_rooms[request.request_id] = room

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        rid = request.request_id
        if rid not in self._reqs:
            return 0, False
        if self._producer:
            # Hold P's request until D's grant arrived (its room is bootstrapped),
            # or until the worker gave up on it (bootstrap_timeout_s).
            return (None, False) if rid not in self._ready else (0, False)
        n = len(request.prompt_token_ids or ()) - num_computed_tokens
        if self._per_layer:
            # Synchronous load: vLLM schedules the request in this step and
            # computes the last prompt token itself (it samples from it), so
            # the connector provides all but that one.
            n -= 1
            return (n, False) if n > 0 else (0, False)
        return (n, True) if n > 0 else (0, False)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        rid = request.request_id
        if self._producer or rid not in self._reqs or num_external_tokens <= 0:
            return
        room, bootstrap, _ = self._reqs[rid]
        prompt = len(request.prompt_token_ids or ())
        # D's own tokens, block aligned (per_layer: vLLM computes the last one)
        prefix = prompt - num_external_tokens - (1 if self._per_layer else 0)
        ids = list(blocks.get_block_ids()[0])
        first, last = prefix // self._block_size, -(-prompt // self._block_size)
        self._pending_recv[rid] = (bootstrap or self._x.get("bootstrap"), room,
                                   ids[first:last], prefix, self._per_layer)
        self._await_first[rid] = room

    def build_connector_meta(self, scheduler_output):
        m = LayercakeMeta(open_rooms=self._new_rooms, receives=self._pending_recv,
                          aborts=self._aborts)
        self._new_rooms, self._pending_recv, self._aborts = {}, {}, {}
        for rid in list(self._await_first):
            if rid in scheduler_output.num_scheduled_tokens:
                m.first_compute[rid] = self._await_first.pop(rid)
        if self._producer:
            for rid, n in scheduler_output.num_scheduled_tokens.items():
                if rid not in self._reqs or rid in self._sent_chunk or not self._ready.get(rid):
                    continue
                req = self._reqs[rid][2]
                prompt = req.num_prompt_tokens
                if req.num_computed_tokens + n < prompt:
                    continue  # an earlier chunk: its KV goes with the last one
                ids = self._kv_cache_manager.get_block_ids(rid)[0]
                m.chunks[rid] = (self._reqs[rid][0], list(ids[:-(-prompt // self._block_size)]))
                self._sent_chunk.add(rid)
        return m

    def update_connector_output(self, connector_output):
        wm = connector_output.kv_connector_worker_meta
        if isinstance(wm, LayercakeWorkerMeta):
            for rid, n in wm.bootstrapped.items():
                if rid not in self._reqs or self._ready.get(rid) is not None:
                    continue
                if n < 0:
                    self._ready[rid] = False
                    continue
                got = self._boot_count.get(rid, 0) + n
                self._boot_count[rid] = got
                if got >= self._tp_size:  # every P rank's room: send
                    self._ready[rid] = True
                    self._boot_count.pop(rid, None)
        self._sending -= set(connector_output.finished_sending or ())

    def has_pending_push_work(self):
        return self._producer and (bool(self._sending) or
                                   any(r not in self._ready for r in self._reqs))

    def request_finished(self, request, block_ids):
        rid = request.request_id
        if rid not in self._reqs:
            return False, None
        room = self._reqs.pop(rid)[0]
        self._ready.pop(rid, None)
        self._boot_count.pop(rid, None)
        self._pending_recv.pop(rid, None)
        self._await_first.pop(rid, None)
        aborted = request.status == RequestStatus.FINISHED_ABORTED
        if self._producer:
            if self._new_rooms.pop(rid, None) is not None:
                return False, None  # the worker never heard of it
            if rid in self._sent_chunk:
                # Free only once D has every byte, or the room ended otherwise.
                self._sent_chunk.discard(rid)
                self._sending.add(rid)
                if aborted:
                    self._aborts[rid] = True
                return True, {ROOM_KEY: room}
            self._aborts[rid] = False  # held, never sent: cancel the room, nothing to wait for
            return False, None
        # D: the worker ignores a room it has already finished; one still
        # waiting is cancelled and reported (vLLM delays the free until then).
        self._aborts[rid] = True
        return False, None

    # ================= worker side =================

    def _worker_init(self):
        self._ctx = None
        self._senders = {}    # P: req_id -> (Sender, t0)
        self._boot = {}       # P: req_id -> bootstrapped (True) / gave up (False)
        self._boot_told = set()
        self._finished_seen = set()
        self._recvs = {}      # D: req_id -> [Receiver, blocks, prefix, t0, granted, sync]
        self._sync_wait = []  # D, per_layer: req_ids this step's forward waits for, per layer
        self._first = {}      # D: req_id -> room, first forward in this step
        self._load_errors = set()
        self._failed_recv = set()
        self._aborted_recv = set()
        self._batch_open = False
        self._records = 0
        self._step_rooms = []
        self.stats = {"save_kv_layer_calls": 0, "save_kv_layer_ns": 0, "save_kv_layer_cpu_ns": 0}
        self._t_last = 0

    def register_kv_caches(self, kv_caches):
        kcc = self._kv_cache_config
        layers, storages = describe_kv_caches(kv_caches, getattr(kcc, "num_blocks", None),
                                              self._block_size)
        if self._tp_size > 1:
            for name, parts in layers:
                if any(p[3] is None for p in parts):
                    raise NotImplementedError(
                        f"layer {name}: KV tensor shape {tuple(kv_caches[name].shape)} strides "
                        f"{kv_caches[name].stride()}: at TP {self._tp_size} a rank's heads must be "
                        "one slice of each block or of each token row (FlashInfer's HND layout, K "
                        "and V apart, is not split between ranks)")
        self._layer_names = [n for n, _ in layers]
        self._layer_index = {n: i for i, n in enumerate(self._layer_names)}
        knobs = dict(self._x.get("knobs", {}))
        if "layerwise_interval" in self._x:
            knobs["layerwise_interval"] = int(self._x["layerwise_interval"])
        self._ctx = lc.Context("vllm-" + ("p" if self._producer else "d"), **knobs)
        self._keep = [t for _, _, t in storages]  # the tensors stay alive with us
        self._regions = [self._ctx.register(lc.RawMemory(ptr, n)) for ptr, n, _ in storages]
        self._layout = build_layout(layers, self._block_size)
        if self._producer:
            host = self._x.get("bootstrap_host", "127.0.0.1")
            port = int(self._x.get("bootstrap_port", 0))
            if self._tp_size > 1 and not port:
                raise ValueError("layercake: P at TP > 1 needs a fixed bootstrap_port in "
                                 "kv_connector_extra_config (rank 0 serves it, the others "
                                 "register there)")
            self._bs = None
            if self._tp_rank == 0:
                self._bs = lc.BootstrapServer(host=host, port=port)
                addr = self._bs.addr
            else:
                addr = f"{host}:{port}"
            self._prefill = lc.Prefill(self._ctx, self._layout, addr, host=host,
                                       world_size=self._tp_size, dp_size=1,
                                       engine_rank=self._tp_rank, metrics_server=self._bs)
            self.bootstrap_addr = addr
            f = self._x.get("bootstrap_file")
            if f and self._tp_rank == 0:
                with open(f + ".tmp", "w") as fh:
                    fh.write(addr)
                os.replace(f + ".tmp", f)
        else:
            self._decode = lc.Decode(self._ctx, self._layout, self._regions,
                                     listen_url=self._x.get("listen_url", "tcp://127.0.0.1:0"),
                                     host=self._x.get("host", "127.0.0.1"),
                                     tp_size=self._tp_size, tp_rank=self._tp_rank)

    def bind_connector_metadata(self, meta):
        super().bind_connector_metadata(meta)
        if self._ctx is None:
            return
        now = time.monotonic()
        if self._producer:
            for rid, room in meta.open_rooms.items():
                self._senders[rid] = (self._prefill.sender(room), now)
            for rid, keep in meta.aborts.items():
                if keep:  # blocks held: cancel, report once final
                    self._cancel_sender(rid, "aborted on P")
                else:
                    self._drop_sender(rid, "aborted on P before its prefill")
            self._poll_bootstrap(now)
            if meta.chunks:
                self._open_batch(meta.chunks)
            return
        self._first = dict(meta.first_compute)
        self._sync_wait = []
        for rid, (bootstrap, room, blocks, prefix, sync) in meta.receives.items():
            try:
                r = self._decode.receiver(bootstrap, room)
            except lc.LayercakeError as e:
                log.warning("layercake: request %s room %s: receiver: %s", rid, room, e)
                self._load_errors.update(blocks)
                if not sync:
                    self._failed_recv.add(rid)
                continue
            self._recvs[rid] = [r, blocks, prefix, now, False, sync]
            if sync:
                self._sync_wait.append(rid)
        for rid in meta.aborts:
            ent = self._recvs.pop(rid, None)
            if ent is None:
                continue  # done already, or never started
            try:
                ent[0].cancel("aborted on D")
            except lc.LayercakeError:
                pass
            ent[0].close()
            if not ent[5]:
                self._aborted_recv.add(rid)  # releases vLLM's delayed free
        self._grant(now)

    # ---- P ----

    def _drop_sender(self, rid, reason):
        ent = self._senders.pop(rid, None)
        if ent is None:
            return
        try:
            if not ent[0].status.final:
                ent[0].abort(reason)
        except lc.LayercakeError:
            pass
        ent[0].close()

    def _cancel_sender(self, rid, reason):
        ent = self._senders.get(rid)
        if ent is not None:
            try:
                if not ent[0].status.final:
                    ent[0].abort(reason)
            except lc.LayercakeError:
                pass

    def _poll_bootstrap(self, now):
        for rid, (s, t0) in list(self._senders.items()):
            if rid in self._boot:
                continue
            st = s.status
            if st >= lc.RoomStatus.BOOTSTRAPPED and not st.final:
                self._boot[rid] = True
            elif st.final or now - t0 > self._bootstrap_timeout:
                log.warning("layercake: room %s not bootstrapped (%s) after %.1f s",
                            s.room, st.name, now - t0)
                self._cancel_sender(rid, f"not bootstrapped after {self._bootstrap_timeout} s")
                self._boot[rid] = False

    def _open_batch(self, chunks):
        eng = self._prefill.engine
        self._step_rooms = []
        with eng.batch():
            for rid, (room, blocks) in chunks.items():
                ent = self._senders.get(rid)
                if ent is None or ent[0].status.final:
                    continue
                skip = ent[0].prefix_pages(self._block_size) or 0
                eng.add_chunk(room, np.asarray(blocks[skip:], dtype=np.int64), dst_index=0,
                              is_last=True)
                self._step_rooms.append(rid)
        self._batch_open, self._records = True, 0

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kw):
        if not self._producer or not self._batch_open:
            return
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        if self._records < len(self._layer_names):
            self._prefill.steps.record_cache()
            self._records += 1
            self._t_last = time.monotonic_ns()
        self.stats["save_kv_layer_cpu_ns"] += time.thread_time_ns() - c0
        self.stats["save_kv_layer_ns"] += time.perf_counter_ns() - t0
        self.stats["save_kv_layer_calls"] += 1

    def wait_for_save(self):
        if not self._producer or not self._batch_open:
            return
        steps = self._prefill.steps
        while self._records < len(self._layer_names):  # layers vLLM did not hook
            steps.record_cache()
            self._records += 1
            self._t_last = time.monotonic_ns()
        for rid in self._step_rooms:
            ent = self._senders.get(rid)
            if ent is not None:
                try:
                    ent[0].set_metadata(METADATA)
                except lc.LayercakeError as e:
                    log.warning("layercake: room %s metadata: %s", ent[0].room, e)
        steps.record_aux()
        for rid in self._step_rooms:
            if rid in self._senders:
                self._timing("p_last_layer", self._senders[rid][0].room, self._t_last)
        if self._step_rooms:
            self._timing("p_stats", -1, 0, **self.stats)
        self._batch_open, self._step_rooms = False, []

    def _timing(self, event, room, t_ns, **kw):
        """One JSON line per event into extra_config['timing_file'] (the
        measurements in docs/vllm.md): CLOCK_MONOTONIC, comparable between
        P and D on one host."""
        f = self._x.get("timing_file")
        if f:
            with open(f, "a") as fh:
                fh.write(json.dumps(dict(event=event, room=room, t_ns=t_ns, **kw)) + "\n")

    def start_load_kv(self, forward_context, **kw):
        if self._producer or self._ctx is None:
            return
        self._grant(time.monotonic())
        # per_layer: this step's forward reads the granted blocks layer by
        # layer, so every synchronous receive must be granted (or have
        # failed) before it starts. P holds its request until the grant.
        while True:
            pending = [rid for rid in self._sync_wait
                       if rid in self._recvs and not self._recvs[rid][4]
                       and not self._recvs[rid][0].status.final]
            if not pending:
                return
            time.sleep(0.0005)
            self._grant(time.monotonic())  # cancels a room past bootstrap_timeout_s

    # ---- D ----

    def _grant(self, now):
        for rid, ent in list(self._recvs.items()):
            r, blocks, prefix, t0, granted = ent[:5]
            if granted:
                continue
            st = r.status
            if st == lc.RoomStatus.BOOTSTRAPPED:
                try:
                    r.send(np.asarray(blocks, dtype=np.int64), prefix_len=prefix)
                    ent[3], ent[4] = now, True
                except lc.LayercakeError as e:
                    log.warning("layercake: room %s grant: %s", r.room, e)
                    r.cancel(f"grant failed: {e}")
            elif not st.final and now - t0 > self._bootstrap_timeout:
                r.cancel(f"not bootstrapped after {self._bootstrap_timeout} s")

    def wait_for_layer_load(self, layer_name):
        """per_layer: block until layer `layer_name` of every request loaded
        in this step has landed (Receiver.layers_ready), each wait bounded by
        layer_timeout_s. A failed or late room's blocks are reported as load
        errors (vLLM then fails or recomputes the request). async: nothing
        to wait for (the request resumes once every byte landed)."""
        if not self._sync_wait:
            return
        idx = self._layer_index.get(layer_name)
        if idx is None:
            return
        t0 = time.monotonic()
        for rid in list(self._sync_wait):
            ent = self._recvs.get(rid)
            if ent is None:
                self._sync_wait.remove(rid)
                continue
            r = ent[0]
            while True:
                ready = r.layers_ready if ent[4] else 0
                if ready > idx:
                    break
                st = r.status
                late = time.monotonic() - t0 > self._layer_timeout
                if st.final or late:
                    why = (f"layer {idx} not landed after {self._layer_timeout} s" if late
                           else f"room {st.name} before layer {idx} landed")
                    log.warning("layercake: room %s: %s", r.room, why)
                    if not st.final:
                        r.cancel(why)
                    self._load_errors.update(ent[1])
                    self._sync_wait.remove(rid)
                    break
                time.sleep(0.0001)
            if idx == len(self._layer_names) - 1 and rid in self._sync_wait:
                self._timing("d_all_landed", r.room, time.monotonic_ns())

    # ---- completion, both sides ----

    def get_transfer_results(self, finished_req_ids):
        now = time.monotonic()
        res = KVConnectorTransferResults()
        if self._ctx is None:
            return res
        if self._producer:
            self._finished_seen |= set(finished_req_ids)
            self._poll_bootstrap(now)
            for rid, (s, t0) in list(self._senders.items()):
                st = s.status
                if not st.final and now - t0 > self._transfer_timeout:
                    s.abort(f"not done after {self._transfer_timeout} s")
                    st = s.status
                if rid in self._finished_seen and st.final:
                    if st != lc.RoomStatus.SUCCESS:
                        log.warning("layercake: room %s %s: %s", s.room, st.name, s.poll().reason)
                    self._drop_sender(rid, "request finished")
                    self._boot.pop(rid, None)
                    self._boot_told.discard(rid)
                    self._finished_seen.discard(rid)
                    res.finished_sending.add(rid)
            self._finished_seen &= set(self._senders)
            return res
        self._grant(now)
        t_now = time.monotonic_ns()
        for rid, room in self._first.items():
            self._timing("d_first_token", room, t_now)
        self._first, self._sync_wait = {}, []
        for rid, ent in list(self._recvs.items()):
            r, blocks, prefix, t0, granted, sync = ent
            info = r.poll()
            if not info.status.final and now - t0 > self._transfer_timeout:
                r.cancel(f"not done after {self._transfer_timeout} s")
                info = r.poll()
            if not info.status.final:
                continue
            if sync:
                # This step's forward read the layers already (or reported
                # load errors); the room ends now: nothing to tell vLLM.
                if info.status != lc.RoomStatus.SUCCESS:
                    log.warning("layercake: room %s %s: %s", r.room, info.status.name, info.reason)
                r.close()
                del self._recvs[rid]
                continue
            if info.status != lc.RoomStatus.SUCCESS:
                log.warning("layercake: room %s %s: %s", r.room, info.status.name, info.reason)
                self._load_errors.update(blocks)
                self._failed_recv.add(rid)
            else:
                self._timing("d_all_landed", r.room, time.monotonic_ns())
            res.finished_recving.add(rid)
            r.close()
            del self._recvs[rid]
        res.finished_recving |= self._failed_recv | self._aborted_recv
        res.failed_recving = set(self._failed_recv)
        self._failed_recv, self._aborted_recv = set(), set()
        return res

    def get_finished(self, finished_req_ids):
        r = self.get_transfer_results(finished_req_ids)
        return r.finished_sending or None, r.finished_recving or None

    def get_block_ids_with_load_errors(self):
        out, self._load_errors = self._load_errors, set()
        return out

    def build_connector_worker_meta(self):
        if not self._producer:
            return None
        new = {rid: 1 if ok else -1 for rid, ok in self._boot.items()
               if rid not in self._boot_told}
        if not new:
            return None
        self._boot_told |= set(new)
        return LayercakeWorkerMeta(new)

    def shutdown(self):
        if getattr(self, "_ctx", None) is None:
            return
        for rid in list(getattr(self, "_senders", {})):
            self._drop_sender(rid, "shutdown")
        for ent in getattr(self, "_recvs", {}).values():
            ent[0].close()
        self._ctx.close()
        self._ctx = None

    def counters(self):
        return dict(self._ctx.counters()) if self._ctx is not None else {}


__all__ = ["LayercakeConnector", "LayercakeMeta", "LayercakeWorkerMeta", "describe_kv_caches",
           "build_layout"]
