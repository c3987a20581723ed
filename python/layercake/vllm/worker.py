"""The worker side of the connector: the layercake Context, P's Prefill
rank (and bootstrap server on rank 0) or D's Decode rank, and every room.
It makes no scheduling decisions: it does what LayercakeMeta says and
reports rooms' ends. Nothing done for one request raises out of a hook: a
layercake error for one room fails that room (its request fails through
vLLM's load-failure path, or P's room is cancelled), logged at a rate
limit with the request id."""
import json
import os
import time

import numpy as np
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults

import layercake as lc

from .layout import build_layout, describe_kv_caches, slices
from .metadata import LayercakeWorkerMeta
from .stats import Counters, LayercakeStats, log, ratelog

METADATA = b"vllm"  # D recomputes the last prompt token: no first token to carry


class WorkerSide:

    def __init__(self, cfg, producer, tp_size, tp_rank, block_size, per_layer, kv_cache_config,
                 groups, engine_id=None):
        self._x = cfg.values
        self.cfg = cfg
        self._producer = producer
        self._tp_size, self._tp_rank = tp_size, tp_rank
        self._block_size = block_size
        self._per_layer = per_layer
        self._kv_cache_config = kv_cache_config
        self._groups = groups  # groups.Groups: vLLM's KV cache groups
        self._engine_id = engine_id  # P: shown on the bootstrap's GET /query for routers
        self._bootstrap_timeout = cfg.bootstrap_timeout_s
        self._transfer_timeout = cfg.transfer_timeout_s
        self._layer_timeout = cfg.layer_timeout_s
        self._idle_wait_s = max(0, cfg.idle_wait_ms) / 1000.0
        # None: the library reads LAYERCAKE_SHARED_SECRET(_FILE) itself.
        self._secret = {"shared_secret": cfg.shared_secret} if cfg.shared_secret else {}
        self.counters = Counters()
        self._addr_told = False
        self._worker_init()

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
        # With a timing_file only (a bench): each save_kv_layer's CPU time,
        # written with the step's p_stats event (bench/vllm_layerwise.py).
        self._save_cpu = [] if self._x["timing_file"] else None
        self.kvstats = LayercakeStats()
        self._t_last_layer = {}  # P: req_id -> monotonic s its last chunk's layers were recorded
        self._page_bytes = 0
        self._t_last = 0
        self._t_final = {}
        self._orphans = set()

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
        # A hybrid model's groups share memory: one layercake layer per
        # slice, recorded when its last vLLM layer is saved (layout.slices).
        layers, self._layer_index, self._record_on = slices(layers, self._groups.layer_group)
        self._nlayers = len(layers)
        knobs = dict(self._x["knobs"] or {})
        knobs.setdefault("layerwise_interval", int(self._x["layerwise_interval"]))
        # The library's own deadlines follow bootstrap_timeout_s: D's room
        # fails once it passes without P's sender taking its pages (a request
        # P never got), and P keeps a D's transfer info that came before its
        # request that long (p_park_ms); their defaults (120 s, 30 s) would
        # outlast the connector's promise.
        boot_ms = max(1, int(self.cfg.bootstrap_timeout_s * 1000))
        knobs.setdefault("bootstrap_timeout_ms", boot_ms)
        if self._producer:
            knobs.setdefault("p_park_ms", boot_ms)
        self._ctx = lc.Context("vllm-" + ("p" if self._producer else "d"), **knobs)
        self._keep = [t for _, _, t in storages]  # the tensors stay alive with us
        self._regions = [self._ctx.register(lc.RawMemory(ptr, n)) for ptr, n, _ in storages]
        self._layout = build_layout(layers, self._block_size)
        self._page_bytes = sum(part[1] for _, parts in layers for part in parts)
        if self._producer:
            host = self._x["bootstrap_host"]
            port = int(self._x["bootstrap_port"])
            if self._tp_size > 1 and not port:
                raise ValueError("layercake: P at TP > 1 needs a fixed bootstrap_port in "
                                 "kv_connector_extra_config (rank 0 serves it, the others "
                                 "register there)")
            self._bs = None
            if self._tp_rank == 0:
                self._bs = lc.BootstrapServer(host=host, port=port, **self._secret)
                addr = self._bs.addr
            else:
                addr = f"{host}:{port}"
            self._prefill = lc.Prefill(self._ctx, self._layout, addr, host=host,
                                       world_size=self._tp_size, dp_size=1,
                                       engine_rank=self._tp_rank, metrics_server=self._bs,
                                       engine_id=self._engine_id, **self._secret)
            self.bootstrap_addr = addr
            self._steps = self._prefill.steps  # one view for every record (save_kv_layer)
            f = self._x["bootstrap_file"]
            if f and self._tp_rank == 0:
                with open(f + ".tmp", "w") as fh:
                    fh.write(addr)
                os.replace(f + ".tmp", f)
        else:
            self._decode = lc.Decode(self._ctx, self._layout, self._regions,
                                     listen_url=self._x["listen_url"],
                                     host=self._x["host"],
                                     tp_size=self._tp_size, tp_rank=self._tp_rank,
                                     **self._secret)

    def bind_connector_metadata(self, meta):
        self._meta_scheduled = meta.scheduled
        if self._ctx is None:
            return
        now = time.monotonic()
        if self._producer:
            for rid, (room, pair) in meta.open_rooms.items():
                try:
                    self._senders[rid] = (_sender(self._prefill, room, pair), now)
                except lc.LayercakeError as e:
                    ratelog.warning("sender", "layercake: request %s room %s: sender: %s",
                                    rid, room, e)
                    self.counters.add("rooms_failed_open")
                    self._boot[rid] = False
            for rid in meta.rejects:
                self._failed_recv.add(rid)
            # A delayed free whose room never opened here (its sender was
            # refused): nothing to wait for, the blocks go back at once.
            self._orphans |= {rid for rid in meta.delayed if rid not in self._senders}
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
        for rid in meta.rejects:
            self._failed_recv.add(rid)
        for rid, (bootstrap, room, pair, blocks, prefix, sync) in meta.receives.items():
            try:
                r = _receiver(self._decode, bootstrap, room, pair)
            except lc.LayercakeError as e:
                ratelog.warning("receiver", "layercake: request %s room %s: receiver: %s",
                                rid, room, e)
                self.counters.add("rooms_failed_open")
                self._load_error(blocks)
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
        self._boot.pop(rid, None)
        self._boot_told.discard(rid)
        self._t_last_layer.pop(rid, None)
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
                ratelog.warning("boot", "layercake: room %s not bootstrapped (%s) after %.1f s",
                            s.room, st.name, now - t0)
                self._cancel_sender(rid, f"not bootstrapped after {self._bootstrap_timeout} s")
                self._boot[rid] = False

    def _open_batch(self, chunks):
        eng = self._prefill.engine
        self._step_rooms, self._batch_rooms = [], 0
        with eng.batch():
            for rid, (room, blocks, first, last) in chunks.items():
                ent = self._senders.get(rid)
                if ent is None or ent[0].status.final:
                    continue
                # dst_index counts the request's blocks from its first token:
                # the engine leaves out those D holds itself (prefix caching)
                # once D's transfer info is in, which may be after this chunk.
                try:
                    eng.add_chunk(room, np.asarray(blocks, dtype=np.int64), dst_index=first,
                                  is_last=last, page_tokens=self._block_size)
                except lc.LayercakeError as e:
                    ratelog.warning("chunk", "layercake: request %s room %s: chunk: %s",
                                    rid, room, e)
                    self._cancel_sender(rid, f"chunk refused: {e}")
                    continue
                if last:
                    self._step_rooms.append(rid)
                self._batch_rooms += 1
        self._batch_open, self._records = True, 0

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kw):
        if not self._producer or not self._batch_open:
            return
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        if self._records < self._nlayers and (self._record_on is None
                                              or layer_name in self._record_on):
            self._steps.record_cache()
            self._records += 1
            self._t_last = time.monotonic_ns()
        c1 = time.thread_time_ns() - c0
        self.stats["save_kv_layer_cpu_ns"] += c1
        self.stats["save_kv_layer_ns"] += time.perf_counter_ns() - t0
        self.stats["save_kv_layer_calls"] += 1
        if self._save_cpu is not None:
            self._save_cpu.append(c1)

    def wait_for_save(self):
        if not self._producer or not self._batch_open:
            return
        steps = self._steps
        while self._records < self._nlayers:  # layers vLLM did not hook
            steps.record_cache()
            self._records += 1
            self._t_last = time.monotonic_ns()
        for rid in self._step_rooms:
            ent = self._senders.get(rid)
            if ent is not None:
                try:
                    ent[0].set_metadata(METADATA)
                except lc.LayercakeError as e:
                    ratelog.warning("room", "layercake: room %s metadata: %s", ent[0].room, e)
        steps.record_aux()
        for rid in self._step_rooms:
            if rid in self._senders:
                self._timing("p_last_layer", self._senders[rid][0].room, self._t_last)
                self._t_last_layer[rid] = self._t_last / 1e9
        if self._save_cpu:
            self._timing("p_stats", -1, 0, save_cpu_ns=self._save_cpu, **self.stats)
            self._save_cpu = []
        self._batch_open, self._step_rooms = False, []

    def _timing(self, event, room, t_ns, **kw):
        """One JSON line per event into extra_config['timing_file'] (the
        measurements in docs/vllm.md): CLOCK_MONOTONIC, comparable between
        P and D on one host."""
        f = self._x["timing_file"]
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
                    self._timing("d_grant", r.room, time.monotonic_ns(), pages=len(blocks),
                                 prefix_tokens=prefix)
                except lc.LayercakeError as e:
                    ratelog.warning("room", "layercake: room %s grant: %s", r.room, e)
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
                    ratelog.warning("room", "layercake: room %s: %s", r.room, why)
                    if not st.final:
                        r.cancel(why)
                    self._load_error(ent[1])
                    self._sync_wait.remove(rid)
                    break
                time.sleep(0.0001)
            if idx == self._nlayers - 1 and rid in self._sync_wait:
                self._timing("d_all_landed", r.room, time.monotonic_ns())
        waited = time.monotonic() - t0
        if waited > 0.0002:
            self.kvstats.observe("layer_wait_s", waited)

    # ---- completion, both sides ----

    def _idle_wait(self):
        """A step that computes nothing only polls transfers (vLLM's engine
        loop runs one after another while requests wait for KV): sleep in
        layercake's wait until a room changes, at most idle_wait_ms, instead
        of spinning the CPU. New requests wait at most that long."""
        meta = getattr(self, "_meta_scheduled", None)
        if meta != 0 or not self._idle_wait_s:
            return
        if self._producer:
            if self._senders:
                self._prefill.wait(self._idle_wait_s)
        elif any(not e[5] for e in self._recvs.values()):
            self._decode.wait(self._idle_wait_s)

    def get_transfer_results(self, finished_req_ids):
        if self._ctx is not None:
            self._idle_wait()
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
                if st.final and rid not in self._t_final:
                    self._t_final[rid] = now
                    self._room_stats(st, s, now - t0, self._t_last_layer.pop(rid, None), now)
                if rid in self._finished_seen and st.final:
                    if st != lc.RoomStatus.SUCCESS:
                        ratelog.warning("room", "layercake: room %s %s: %s", s.room, st.name, s.poll().reason)
                    self._drop_sender(rid, "request finished")
                    self._t_final.pop(rid, None)
                    self._boot.pop(rid, None)
                    self._boot_told.discard(rid)
                    self._finished_seen.discard(rid)
                    res.finished_sending.add(rid)
            self._finished_seen &= set(self._senders)
            res.finished_sending |= self._orphans
            self._orphans = set()
            if self._failed_recv:
                res.finished_recving = set(self._failed_recv)
                res.failed_recving = set(self._failed_recv)
                self._failed_recv = set()
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
                    ratelog.warning("room", "layercake: room %s %s: %s", r.room, info.status.name, info.reason)
                r.close()
                del self._recvs[rid]
                continue
            self._room_stats(info.status, r, now - t0 if granted else None, None, now,
                             len(blocks) * self._page_bytes)
            if info.status != lc.RoomStatus.SUCCESS:
                ratelog.warning("room", "layercake: room %s %s: %s", r.room, info.status.name, info.reason)
                self._load_error(blocks)
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

    def _load_error(self, blocks):
        """A failed load's blocks for get_block_ids_with_load_errors. vLLM
        refuses block-level errors with several KV cache groups: there the
        request fails through failed_recving alone (async loads only)."""
        if not self._groups.hybrid:
            self._load_errors.update(blocks)

    def get_block_ids_with_load_errors(self):
        out, self._load_errors = self._load_errors, set()
        return out

    def build_connector_worker_meta(self):
        if not self._producer:
            return None
        new = {rid: 1 if ok else -1 for rid, ok in self._boot.items()
               if rid not in self._boot_told}
        addr = None
        if not self._addr_told and getattr(self, "_bs", None) is not None:
            addr, self._addr_told = self.bootstrap_addr, True
        if not new and addr is None:
            return None
        self._boot_told |= set(new)
        return LayercakeWorkerMeta(new, addr)

    def shutdown(self):
        if getattr(self, "_ctx", None) is None:
            return
        for rid in list(getattr(self, "_senders", {})):
            self._drop_sender(rid, "shutdown")
        for ent in getattr(self, "_recvs", {}).values():
            ent[0].close()
        self._ctx.close()
        self._ctx = None


    def _room_stats(self, status, room, transfer_s, t_last_layer, now, nbytes=None):
        """One room's end into vLLM's stats (LayercakeStats)."""
        if status == lc.RoomStatus.SUCCESS:
            self.kvstats.count("rooms_ok")
            if transfer_s is not None:
                self.kvstats.observe("transfer_s", transfer_s)
            if t_last_layer is not None:
                self.kvstats.observe("exposed_tail_s", max(0.0, now - t_last_layer))
            if nbytes:
                self.kvstats.observe("bytes", nbytes)
            return
        try:
            reason = room.poll().fail_reason
            name = getattr(reason, "name", str(reason)).lower()
        except Exception:  # noqa: BLE001 - a closed handle: the reason is unknown
            name = "unknown"
        self.kvstats.count(f"failed_{name}")

    def all_counters(self):
        out = dict(self.counters)
        if self._ctx is not None:
            out.update(self._ctx.counters())
        return out


def _sender(prefill, room, pair):
    return prefill.sender(room, pair=pair)


def _receiver(decode, bootstrap, room, pair):
    return decode.receiver(bootstrap, room, pair=pair)
