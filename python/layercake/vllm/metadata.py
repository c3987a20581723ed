"""What the scheduler side tells the worker side each step, and back."""
from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorWorkerMetadata,
)


@dataclass
class LayercakeMeta(KVConnectorMetadata):
    # P: rooms to open (req_id -> (room, pair)), chunks of this step
    # (req_id -> (room, block ids of the prompt)).
    open_rooms: dict = field(default_factory=dict)
    chunks: dict = field(default_factory=dict)
    # D: receives to start (req_id -> (bootstrap, room, pair, block ids,
    # prefix tokens, synchronous)).
    receives: dict = field(default_factory=dict)
    # Both: req_id -> True (cancel, report when final) / False (drop).
    aborts: dict = field(default_factory=dict)
    # Both: requests refused at the edge (req_id -> reason): the worker
    # reports each as a failed load, so vLLM finishes it with an error.
    rejects: dict = field(default_factory=dict)
    # D: req_id -> room, for requests whose first forward (after their KV
    # load) is this step (the timing of D's first token).
    first_compute: dict = field(default_factory=dict)
    # P: requests whose free vLLM delays for the connector (request_finished
    # said so): each must come back in finished_sending, sender or not.
    delayed: set = field(default_factory=set)
    # Tokens this step computes: 0 is a step vLLM runs only to hear of
    # transfers, in which the worker may sleep until one changes.
    scheduled: int = 0


@dataclass
class LayercakeWorkerMeta(KVConnectorWorkerMetadata):
    # P: req_id -> how many TP ranks' rooms have bootstrapped since the
    # last report, or -1: one of them failed before bootstrap. Summed over
    # the ranks (vLLM's KVOutputAggregator calls aggregate); the scheduler
    # sends a request's KV once every rank's room is bootstrapped.
    bootstrapped: dict = field(default_factory=dict)
    # P rank 0: its bootstrap address, once (the scheduler returns it to a
    # router that sends P first, in the request's kv_transfer_params).
    bootstrap_addr: str | None = None

    def aggregate(self, other):
        out = LayercakeWorkerMeta(dict(self.bootstrapped),
                                  self.bootstrap_addr or other.bootstrap_addr)
        for k, v in other.bootstrapped.items():
            a = out.bootstrapped.get(k, 0)
            out.bootstrapped[k] = -1 if a < 0 or v < 0 else a + v
        return out
