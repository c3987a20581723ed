"""The ctypes structs mirror include/layercake.h exactly.

1. A tiny C program, generated from the ctypes declarations and compiled
   against the header, prints sizeof and every offsetof; they must match.
2. Structs round-trip through the library (what the library writes back is
   what Python reads), which also holds where no compiler is installed.
"""
import ctypes
import os
import shutil
import subprocess

import pytest

import layercake as lc
from layercake import _ffi

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


# Plain C constants Python holds (C name, Python value).
_PLAIN = [("LC_MEM_KIND_HOST", lc.core.MEM_HOST), ("LC_MEM_KIND_PINNED", lc.core.MEM_PINNED),
          ("LC_MEM_KIND_CUDA", lc.core.MEM_CUDA), ("LC_MEM_KIND_SIM", lc.core.MEM_SIM),
          ("LC_MEM_SHAREABLE", lc.core.MEM_SHAREABLE), ("LC_MEM_NO_HUGEPAGE", lc.core.MEM_NO_HUGEPAGE),
          ("LC_TOKEN_LEN", _ffi.TOKEN_LEN), ("LC_REGION_DESC_MAX", _ffi.REGION_DESC_MAX),
          ("LC_PAIR_MIN", _ffi.PAIR_MIN), ("LC_PAIR_MAX", _ffi.PAIR_MAX),
          ("LC_STEP_MOD", _ffi.STEP_MOD), ("LC_STEP_CACHE", lc.Steps.CACHE),
          ("LC_STEP_AUX", lc.Steps.AUX), ("LC_CUDA_PTR_HOST", lc.gpu.PTR_HOST),
          ("LC_CUDA_PTR_PINNED", lc.gpu.PTR_PINNED), ("LC_CUDA_PTR_DEVICE", lc.gpu.PTR_DEVICE),
          ("LC_CUDA_PTR_MANAGED", lc.gpu.PTR_MANAGED)]


def _c_program():
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "layercake.h"',
             '#include "layercake/testing.h"', "int main(void) {"]
    for s in _ffi.STRUCTS:
        lines.append(f'printf("sizeof {s._c_name_} %zu\\n", sizeof({s._c_name_}));')
        for name, _t in s._fields_:
            lines.append(f'printf("{s._c_name_} {name} %zu\\n", offsetof({s._c_name_}, {name}));')
    lines.append('printf("LC_FAIL_REASON_COUNT %d\\n", (int)LC_FAIL_REASON_COUNT);')
    lines.append('printf("LC_HIST_BUCKETS %d\\n", (int)LC_HIST_BUCKETS);')
    lines.append('printf("LC_METADATA_MAX %d\\n", (int)LC_METADATA_MAX);')
    lines.append('printf("LC_REASON_MAX %d\\n", (int)LC_REASON_MAX);')
    lines.append('printf("LC_BATCH_DEFER %d\\n", (int)LC_BATCH_DEFER);')
    # The enums Python spells out (its own member names) and the tables it
    # reads at import (error codes, failure reasons): every value as C has it.
    for prefix, enum in (("LC_ROOM_", lc.RoomStatus), ("LC_BUFFER_", lc.BufferKind),
                         ("LC_LAYOUT_", lc.Model)):
        for m in enum:
            lines.append(f'printf("{prefix}{m.name} %d\\n", (int){prefix}{m.name});')
    for name, _v in _PLAIN:
        lines.append(f'printf("{name} %lld\\n", (long long){name});')
    lines.append('#define P_(name, value, text) printf("table " #name " %d\\n", (int)(value));')
    lines.append("LC_ERROR_CODES(P_) LC_FAIL_REASONS(P_)")
    lines.append("return 0; }")
    return "\n".join(lines)


def test_every_struct_matches_the_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler: the round-trip tests below still check the layouts")
    src = tmp_path / "layout.c"
    src.write_text(_c_program())
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)],
                   check=True, timeout=60)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=30).stdout
    c = {}
    for line in out.splitlines():
        *key, value = line.split()
        c[" ".join(key)] = int(value)
    mismatches = []
    for s in _ffi.STRUCTS:
        if c[f"sizeof {s._c_name_}"] != ctypes.sizeof(s):
            mismatches.append(f"sizeof({s._c_name_}): C {c[f'sizeof {s._c_name_}']} py {ctypes.sizeof(s)}")
        for name, _t in s._fields_:
            co, po = c[f"{s._c_name_} {name}"], getattr(s, name).offset
            if co != po:
                mismatches.append(f"{s._c_name_}.{name}: C {co} py {po}")
    assert not mismatches, "\n".join(mismatches)
    assert c["LC_FAIL_REASON_COUNT"] == _ffi.FAIL_REASON_COUNT
    assert c["LC_HIST_BUCKETS"] == _ffi.HIST_BUCKETS
    assert c["LC_METADATA_MAX"] == _ffi.METADATA_MAX
    assert c["LC_REASON_MAX"] == _ffi.REASON_MAX
    assert c["LC_BATCH_DEFER"] == _ffi.BATCH_DEFER
    for prefix, enum in (("LC_ROOM_", lc.RoomStatus), ("LC_BUFFER_", lc.BufferKind),
                         ("LC_LAYOUT_", lc.Model)):
        for m in enum:
            assert c[f"{prefix}{m.name}"] == int(m), f"{enum.__name__}.{m.name}"
    for name, v in _PLAIN:
        assert c[name] == v, name
    table = {k[len("table "):]: v for k, v in c.items() if k.startswith("table ")}
    errors = {k: v for k, v in table.items() if not k.startswith("LC_FAIL_")}
    assert errors == lc.errors.CODES  # read from the library at import
    fails = {k[len("LC_FAIL_"):]: v for k, v in table.items() if k.startswith("LC_FAIL_")}
    assert fails == {m.name: int(m) for m in lc.FailReason}


def test_buffers_round_trip_through_a_layout():
    bufs = [lc.Buffer(0x10000 * (i + 1), 4096 * 8, 4096, layer=i % 3, kind=i % 7, flags=i % 2)
            for i in range(7)]
    layout = lc.Layout(bufs)
    assert layout.buffers == [lc.Buffer(b.base, b.length, b.item_len, b.layer, lc.BufferKind(b.kind), b.flags)
                              for b in bufs]
    assert layout.layer_count == 3 and layout.layer_buffers(1) == [1, 4]


def test_the_library_fills_exactly_our_struct_sizes():
    # lc_engine_metrics and the room polls copy min(out->size, sizeof(C struct))
    # and write that back into out->size: equal means the sizes agree.
    ctx = lc.Context("ffi")
    mem = lc.Memory(1 << 21)
    ctx.register(mem)
    layout = lc.Layout.mla(2, 8, 4096, bases=[mem.address, mem.address + 8 * 4096])
    e = lc.Engine(ctx, layout)
    m = _ffi.EngineMetrics()
    m.size = ctypes.sizeof(m) + 64  # asks for more than C has
    assert _ffi.lc_engine_metrics(e._h, ctypes.byref(m)) == 0
    assert m.size == ctypes.sizeof(_ffi.EngineMetrics)
    e.room_open(5)
    ri = _ffi.RoomInfo()
    ri.size = ctypes.sizeof(ri) + 64
    assert _ffi.lc_engine_room_status(e._h, 5, ctypes.byref(ri)) == 0
    assert ri.size == ctypes.sizeof(_ffi.RoomInfo) and ri.status == lc.RoomStatus.BOOTSTRAPPING
    # A destination with known fields: read back through the room info.
    e.room_dst_add(5, dummy=True, required_dst_count=2)
    info = e.room_status(5)
    assert (info.dst_count, info.required_dst_count) == (1, 2)
    ctx.close()


def test_step_arithmetic_is_the_librarys():
    assert lc.step_ready(1, 0) and not lc.step_ready(0, 0) and not lc.step_ready(0, 5)
    assert lc.step_ready(0, lc.STEP_MOD - 1)  # wraparound
    assert lc.step_ready(lc.STEP_MOD // 2 - 1, 0)  # ahead by less than half: ready
    assert not lc.step_ready(lc.STEP_MOD // 2 + 5, 0)  # "ahead" by more: behind
