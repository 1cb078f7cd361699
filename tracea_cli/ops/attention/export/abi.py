"""attention's part of the exported ABI (docs/attention.md, docs/kernel-abi.md): the op header tracea_attention.h
(the argument struct, the C++ call `tracea::attention(q, k, v, out, params)`), the slots the launch tables name, the
prefix functions of an export's header, and the example program. The export itself (export/) knows none of this by
name: it reads it here through the op's `export` attribute.

An export serves the mask, layout and lse flag it was made for (its `fields`, in that order); the head dim is compiled
in (the family's `serves`), the other sizes are run-time arguments. The FA2 kernel reads any (batch, head, row)
strides, so the C++ call takes 4-D views in either layout and finds the export by the layout the strides show. The
fa3 kernel (sm_90a) reads each of q, k and v through one 3-D tensor map over (head_dim, rows, batch·heads): its plan
requires the batch stride to be heads × the head stride (kv_heads × for k and v), which the runtime checks per call
(TRACEA_ERROR_UNSUPPORTED_LAYOUT where it does not hold)."""

from __future__ import annotations

from importlib import resources
from typing import Any, Mapping

from tracea_cli import __version__
from tracea_cli.ops.attention.problem import LAYOUTS
from tracea_cli.ops.base import ExportAbi
from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.export_example import example_support

HEADER = "tracea_attention.h"
POINTERS = ("q", "k", "v", "out", "lse", "workspace")
# the sizes (dispatch), batch·heads (grid y), the (batch, head, row) strides of q and out, of k and v, and
# batch·kv_heads (the outer size of fa3's K and V maps)
INTS = ("batch", "heads", "seq", "head_dim", "kv_heads", "seq_k", "bh", "q_sb", "q_sh", "q_sr", "kv_sb", "kv_sh",
        "kv_sr", "kv_bh")
_STORAGE = {"fp16": "uint16_t", "bf16": "uint16_t"}


def _template(name: str) -> str:
    return resources.files("tracea_cli.ops.attention.export").joinpath(name).read_text()


def header_text(slots: str) -> str:
    """tracea_attention.h, with the export's generated slot enum and ABI table (`slots`) in place."""
    layouts = " ".join(f"TRACEA_ATTENTION_LAYOUT_{name.upper()} = {i}," for i, name in enumerate(LAYOUTS))
    return (_template(HEADER).replace("@VERSION@", __version__).replace("@SLOTS@", slots)
            .replace("@LAYOUTS@", f"typedef enum tracea_attention_layout {{ {layouts.rstrip(',')} }} "
                                  "tracea_attention_layout;"))


def fields(problem: Any) -> tuple[int, ...]:
    """causal, layout, lse as tracea_attention.h codes them."""
    return (int(problem.causal), LAYOUTS.index(problem.layout), int(problem.lse))


def prefix(problem: Any) -> str:
    tail = ("_causal" if problem.causal else "") + ("_lse" if problem.lse else "")
    return f"tracea_attention_{problem.dtype}_d{problem.head_dim}_{problem.layout}{tail}"


def api(p: str, staged: bool) -> str:
    """The prefix functions of an export's header (`p` its prefix; attention stages nothing)."""
    return f"""/* out = softmax(q.k^T / sqrt(D) + mask).v on `stream`: the device is the stream's (for the default
 * stream, the calling thread's current context's, else device 0). Loads the binaries on first use. Returns TRACEA_OK or
 * the reason it did not launch. */
static inline tracea_status {p}_launch(const tracea_attention_args* args, CUstream stream) {{
  return tracea__attention(&{p}__export, args, stream);
}}

/* Bytes of scratch args->workspace must hold for a call with these sizes (0 when none is needed: no split-KV). */
static inline size_t {p}_workspace_bytes(const tracea_attention_args* args) {{
  return tracea__attention_workspace_bytes(&{p}__export, args);
}}"""


def api_summary(p: str) -> str:
    return (f""" *   {p}_launch(&args, stream)        out = softmax(q.k^T / sqrt(D) + mask).v (args: {HEADER})\n"""
            f""" *   {p}_workspace_bytes(&args)       scratch bytes args.workspace needs (0: none)""")


def example(manifest: Mapping[str, Any], c_header: str) -> str:
    """example.cpp: runs the export once on a stream and checks it against a float64 reference computed there."""
    first = manifest["shape"][0]
    dtype = manifest["dtype"]
    flag = {True: "true", False: "false"}
    text = (_template("example.cpp").replace("@VERSION@", __version__).replace("@SUPPORT@", example_support())
            .replace("@HEADER@", c_header).replace("@DTYPE@", dtype).replace("@LAYOUT@", manifest["layout"])
            .replace("@STORAGE@", _STORAGE[dtype]).replace("@BOUND@", repr(get_dtype(dtype).bound))
            .replace("@CAUSAL@", flag[bool(manifest["causal"])]).replace("@LSE@", flag[bool(manifest["lse"])])
            .replace("@BLHD@", flag[manifest["layout"] == "blhd"]))
    for name in ("batch", "heads", "seq", "head_dim", "kv_heads", "seq_k"):
        text = text.replace(f"@{name.upper()}@", str(first[name]))
    return text


ABI = ExportAbi(
    header=HEADER,
    header_text=header_text,
    slot_prefix="TRACEA_ATTENTION_",
    pointers=POINTERS,
    ints=INTS,
    workspace="workspace",
    grid_sizes=("seq", "bh", "seq_k"),
    dispatch=("batch", "heads", "seq", "head_dim", "kv_heads", "seq_k"),
    tensors=(("q", "q_sr"), ("k", "kv_sr"), ("v", "kv_sr"), ("out", "q_sr")),  # lse: fp32, written 4 bytes at a time
    fields=fields,
    prefix=prefix,
    api=api,
    api_summary=api_summary,
    example=example,
)
