"""What every family adapter shares: strict tensor access and head splitting.

The mapping from each Hugging Face family to the canonical layout (column
convention, per head ``Q, K, V: [H, d_h, d]``, ``O: [H, d, d_h]``):

==========  =================================  ===========================================
family      HF tensor (per layer)              canonical
==========  =================================  ===========================================
BERT        attention.self.query.weight [d,d]  q = W.reshape(H, d_h, d)    (nn.Linear [out,in])
            attention.output.dense.weight      o = W.reshape(d, H, d_h).transpose(1, 0, 2)
            intermediate.dense / output.dense  w1 [f, d] / w2 [d, f]
ALBERT      attention.query/key/value/dense    as BERT; ffn / ffn_output -> w1 / w2
GPT-2       attn.c_attn.weight [d, 3d]         Conv1D [in,out]: W = weight.T; q|k|v = rows 0:d|d:2d|2d:3d
            attn.c_proj.weight [d, d]          o from weight.T;  mlp.c_fc/c_proj: w1 = weight.T, w2 = weight.T
GPT-Neo     attn.attention.{q,k,v}_proj        as BERT (nn.Linear, no q/k/v biases); out_proj -> o
Llama       self_attn.{q,k,v,o}_proj           as BERT; k, v keep their H_kv <= H heads (GQA);
(Mistral,   mlp.{up,gate,down}_proj            w1, wg, w2 (gated MLP); RMSNorm gains, RoPE
Qwen2,
Gemma)
GPT-NeoX    attention.query_key_value [3d, d]  W.reshape(H, 3, d_h, d): q | k | v per head
OPT, Phi    self_attn.{q,k,v}_proj ...         as BERT (OPT: positions offset by 2)
==========  =================================  ===========================================

docs/weights.md has every tensor of every family.

So ``F = Σ_h O_h V_h`` is ``output.dense.weight @ value.weight`` (BERT/ALBERT/GPT-Neo) and
``(W_v_conv @ c_proj.weight).T`` (GPT-2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from jaxattn.errors import CheckpointError, positive_int


def find_prefix(tensors: dict, anchor: str) -> str:
    """The prefix (``''``, ``'bert.'``, ``'transformer.'``...) in front of ``anchor``."""
    hits = sorted((k[: -len(anchor)] for k in tensors if k.endswith(anchor)), key=len)
    if not hits:
        raise CheckpointError(f"missing tensor '{anchor}' (checked with any prefix)")
    return hits[0]


class Tensors:
    """Strict access to a checkpoint's tensors: missing, mis-shaped, non-finite and left-over
    tensors each give one clear error naming the tensor."""

    def __init__(self, tensors: dict, prefix: str = ""):
        self._t = tensors
        self.prefix = prefix
        self.used: set[str] = set()

    def has(self, name: str) -> bool:
        return self.prefix + name in self._t

    def get(self, name: str, shape: tuple) -> np.ndarray:
        key = self.prefix + name
        if key not in self._t:
            raise CheckpointError(f"missing tensor '{key}'")
        a = np.asarray(self._t[key])
        if tuple(a.shape) != tuple(shape):
            raise CheckpointError(f"tensor '{key}' has shape {tuple(a.shape)}, expected {tuple(shape)}")
        if not np.issubdtype(a.dtype, np.floating):
            raise CheckpointError(f"tensor '{key}' has dtype {a.dtype}, expected a floating type")
        if not np.all(np.isfinite(a)):
            raise CheckpointError(f"tensor '{key}' has non-finite values (NaN or inf)")
        self.used.add(key)
        return a

    def check_all_used(self, ignore: Iterable[str]) -> None:
        """Refuse tensors that are neither used nor known to be irrelevant (heads, buffers)."""
        pats = [re.compile(p) for p in ignore]
        extra = sorted(k for k in self._t if k not in self.used and not any(p.fullmatch(k) for p in pats))
        if extra:
            more = f" (and {len(extra) - 3} more)" if len(extra) > 3 else ""
            raise CheckpointError(f"unexpected tensor(s) {', '.join(repr(e) for e in extra[:3])}{more}: "
                                  "the checkpoint does not match its config.json")


def split_rows(W: np.ndarray, H: int) -> np.ndarray:
    """``[d_out, d] -> [H, d_h, d]``: head h owns rows ``h*d_h:(h+1)*d_h``."""
    return W.reshape(H, W.shape[0] // H, W.shape[1])


def split_cols(W: np.ndarray, H: int) -> np.ndarray:
    """``[d, d_in] -> [H, d, d_h]``: head h owns columns ``h*d_h:(h+1)*d_h``."""
    d, din = W.shape
    return W.reshape(d, H, din // H).transpose(1, 0, 2)


def split_bias(b: np.ndarray | None, H: int) -> np.ndarray | None:
    return None if b is None else b.reshape(H, b.shape[0] // H)


def per_head(H: int, *, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, bq: np.ndarray | None = None,
             bk: np.ndarray | None = None, bv: np.ndarray | None = None) -> dict:
    """The projections of a block of ``H`` heads (``q``, ``k``, ``v``: ``[d_out, d]``; ``o``: ``[d, d_in]``) and
    their biases split by head (:func:`split_rows`, :func:`split_cols`, :func:`split_bias`), as :func:`build` takes
    them."""
    return dict(q=split_rows(q, H), k=split_rows(k, H), v=split_rows(v, H), o=split_cols(o, H),
                bq=split_bias(bq, H), bk=split_bias(bk, H), bv=split_bias(bv, H))


def cfg_int(config: dict, *names: str, default=None) -> int:
    for n in names:
        if config.get(n) is not None:
            return positive_int(f"config.json: {n}", config[n], CheckpointError)
    if default is not None:
        return default
    raise CheckpointError(f"config.json lacks {' / '.join(names)}")


def check_heads(d: int, H: int) -> int:
    if d % H:
        raise CheckpointError(f"config.json: hidden size {d} is not divisible by {H} attention heads")
    return d // H


def stack(dicts: list[dict]) -> dict:
    """List of per-set dicts -> dict of stacked ``[G, ...]`` arrays (None stays None)."""
    out = {}
    for k in dicts[0]:
        vals = [d[k] for d in dicts]
        out[k] = None if vals[0] is None else np.stack(vals)
    return out
