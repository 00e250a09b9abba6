"""Reading a compiled program: its loops, the kernels each loop body launches, and what each kernel moves.

The optimised HLO of a compiled program (``jax.stages.Compiled.as_text()``) is read as text: computations, their
instructions, and the ``while`` loops with the trip counts XLA proved. A *kernel* is an instruction that launches
work on the device: a fusion, a library call (``custom-call``), a copy, a stand-alone reduction or any other
non-trivial operation; parameters, tuples, bitcasts, constants and the loops themselves launch nothing. What a
kernel moves is counted from the shapes of its operands and results (every operand read once, every result written
once), and its FLOPs from the operations inside it (``2 M N K`` a product, one per element of every arithmetic
operation): a cost model from the program's shapes, since a program compiled without its device has no cost
analysis of its own.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from typing import Any

from jaxattn.model import fused

#: Bytes of an element by HLO type.
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s4": 1, "u4": 1, "f8e4m3fn": 1, "f8e5m2": 1, "bf16": 2, "f16": 2, "s16": 2,
          "u16": 2, "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16, "token": 0}
#: Instructions that launch nothing on the device.
_FREE = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "while", "conditional", "call",
         "after-all", "add-dependency", "partition-id", "replica-id", "opt-barrier", "iota"}
#: Elementwise operations counted as one FLOP per element (transcendentals counted apart too).
_TRANSCENDENTAL = {"exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt", "rsqrt", "cbrt", "tanh",
                   "logistic", "sine", "cosine", "tan", "atan2", "power", "erf"}
_ARITHMETIC = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "negate", "abs", "compare", "select",
               "remainder", "sign", "floor", "ceil", "round-nearest-even", "clamp", "and", "or", "not", "xor",
               "is-finite"} | _TRANSCENDENTAL

_SHAPE = re.compile(r"([a-z0-9]+)\[([0-9,]*)\]")
#: The custom call of a Pallas kernel compiled by Triton.
_TRITON = "__gpu$xla.gpu.triton"


def _elements(dims: str) -> int:
    return math.prod(int(x) for x in dims.split(",") if x) if dims else 1


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape (``f32[2048,32,2]{2,1,0}``, or a tuple of them)."""
    return sum(_BYTES.get(t, 4) * _elements(dims) for t, dims in _SHAPE.findall(shape))


def shape_elements(shape: str) -> int:
    return sum(_elements(dims) for _, dims in _SHAPE.findall(shape))


@dataclasses.dataclass(frozen=True)
class Instruction:
    name: str
    shape: str
    op: str
    operands: tuple[str, ...]
    attrs: str


def _split_instruction(line: str) -> Instruction | None:
    m = re.match(r"\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*", line)
    if not m:
        return None
    rest = line[m.end():]
    if rest.startswith("("):  # a tuple shape: up to its matching parenthesis
        i = _closing(rest, 0)
        shape, rest = rest[: i + 1], rest[i + 1:].lstrip()
    else:
        shape, _, rest = rest.partition(" ")
    op, paren, rest = rest.partition("(")
    if not paren:
        return None
    i = _closing(rest, 1)
    operands = tuple(re.findall(r"%([\w.\-]+)", rest[:i]))
    return Instruction(m.group(1), shape, op.strip(), operands, rest[i + 1:])


def _closing(text: str, depth: int) -> int:
    """The index of the parenthesis that closes at ``depth`` open ones (the end of ``text`` if none does)."""
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0:
            return i
    return len(text)


def computations(text: str) -> tuple[dict[str, list[Instruction]], str]:
    """The computations of an HLO module's text by name, and the name of its entry computation."""
    comps: dict[str, list[Instruction]] = {}
    entry, current = "", None
    for line in text.splitlines():
        head = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$", line)
        if head and not line.startswith(" "):
            current = head.group(2)
            comps[current] = []
            entry = current if head.group(1) else entry
            continue
        if line.startswith("}"):
            current = None
            continue
        if current is not None:
            ins = _split_instruction(line)
            if ins is not None:
                comps[current].append(ins)
    return comps, entry


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One kernel of a loop body (or of the program outside its loops).

    Attributes:
        name: the instruction's name in the program.
        kind: what it is: ``'gemm'`` (a product, fused or a library call), ``'softmax'`` (XLA's fused reductions
            with their elementwise producers and consumers: a softmax, a normalisation), ``'reduction'``,
            ``'elementwise'``, ``'copy'``, ``'update-slice'`` (a row written into a carried buffer), ``'pallas'`` (a
            Pallas kernel compiled by Triton; :mod:`jaxattn.model.fused`'s attention has its arithmetic counted from
            its sizes), ``'other'``.
        shape: its result's HLO shape.
        flops: arithmetic from the shapes (``2 M N K`` per product, one per element of every other operation).
        transcendentals: exponentials, square roots and the like, per call.
        bytes: operands read and results written, once each.
    """

    name: str
    kind: str
    shape: str
    flops: int
    transcendentals: int
    bytes: int


def _kind(ins: Instruction, called: list[Instruction]) -> str:
    backend = re.search(r'"kind":"(\w+)"', ins.attrs)  # a GPU fusion's emitter (__triton_nested_gemm_fusion, ...)
    emitter = backend.group(1) if backend else ""
    ops = {c.op for c in called}
    if ins.op == "copy":
        return "copy"
    if ins.op == "custom-call":
        target = re.search(r'custom_call_target="([^"]*)"', ins.attrs)
        if target and target.group(1) == _TRITON:
            return "pallas"
        return "gemm" if target and re.search(r"gemm|matmul|dot", target.group(1), re.I) else "other"
    if "gemm" in emitter or ops & {"dot", "convolution"} or ins.op in ("dot", "convolution"):  # a TPU's: convolutions
        return "gemm"
    if emitter.startswith("__triton") and "reduce" in ops:
        return "softmax"
    if "dynamic-update-slice" in ops or ins.op == "dynamic-update-slice":
        return "update-slice"
    if "reduce" in ops or ins.op == "reduce":
        return "reduction"
    if ins.op in ("fusion", *_ARITHMETIC):
        return "elementwise"
    return "other"


def _cost(comps: dict[str, list[Instruction]], comp: list[Instruction], seen: set[str]) -> tuple[int, int]:
    """FLOPs and transcendentals of the operations of one computation (and the computations it calls)."""
    shapes = {i.name: i.shape for i in comp}
    flops = trans = 0
    for ins in comp:
        n = shape_elements(ins.shape)
        if ins.op == "dot":
            lhs = shapes.get(ins.operands[0], "") if ins.operands else ""
            dims = [int(x) for x in (_SHAPE.findall(lhs)[0][1].split(",") if _SHAPE.findall(lhs) else []) if x]
            contracting = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", ins.attrs)
            k = math.prod(dims[int(c)] for c in contracting.group(1).split(",") if c) if contracting and dims else 1
            flops += 2 * n * k
        elif ins.op == "reduce":
            flops += sum(shape_elements(shapes.get(o, "")) for o in ins.operands[: max(1, len(ins.operands) // 2)])
        elif ins.op in _ARITHMETIC:
            flops += n
            trans += n if ins.op in _TRANSCENDENTAL else 0
        for callee in re.findall(r"(?:calls|to_apply)=%?([\w.\-]+)", ins.attrs):
            if callee in comps and callee not in seen and ins.op != "reduce":
                f, t = _cost(comps, comps[callee], seen | {callee})
                flops, trans = flops + f, trans + t
    return flops, trans


def _kernel(comps: dict[str, list[Instruction]], shapes: dict[str, str], ins: Instruction) -> Kernel:
    callees = [c for c in re.findall(r"calls=%?([\w.\-]+)", ins.attrs) if c in comps]
    called = [i for c in callees for i in comps[c]]
    flops, trans = _cost(comps, called, set(callees)) if callees else _cost(comps, [ins], set())
    if ins.op == "custom-call" and _kind(ins, called) == "gemm" and len(ins.operands) >= 2:
        lhs = _SHAPE.findall(shapes.get(ins.operands[0], ""))
        k = int(lhs[0][1].split(",")[-1]) if lhs and lhs[0][1] else 1
        flops = 2 * shape_elements(_SHAPE.findall(ins.shape)[0][0] + "[" + _SHAPE.findall(ins.shape)[0][1] + "]") * k
    if _kind(ins, called) == "pallas":
        flops, trans = _pallas_cost(ins, shapes)
    read = sum(shape_bytes(shapes.get(o, "")) for o in dict.fromkeys(ins.operands))
    return Kernel(ins.name, _kind(ins, called), ins.shape.split("{")[0], flops, trans, read + shape_bytes(ins.shape))


def _pallas_cost(ins: Instruction, shapes: dict[str, str]) -> tuple[int, int]:
    """FLOPs and transcendentals of a Pallas kernel: counted from the sizes of jaxattn's fused attention (its name,
    its grid and its queries' block ``[..., n, H·d_h]``); nothing known of any other (a Triton program is opaque)."""
    heads = re.search(rf'name = "{fused.NAME}(\d+)"', ins.attrs)
    q = _SHAPE.findall(shapes.get(ins.operands[0], "")) if ins.operands else []
    if not heads or not q:
        return 0, 0
    dims = [int(x) for x in q[0][1].split(",") if x]
    H, (n, hd) = int(heads.group(1)), dims[-2:]
    programs = math.prod(int(g) for g in re.findall(r"grid_[xyz] = (\d+)", ins.attrs)) or 1  # one a head
    flops, trans = fused.cost(n, H, hd // H)
    return programs * flops // H, programs * trans // H


@dataclasses.dataclass(frozen=True)
class Loop:
    """A ``while`` loop of the program: its body's kernels, its trip count (``None`` where XLA did not prove one)
    and ``calls``, the times it runs in one call of the program (the trip counts of the loops around it)."""

    body: str
    trips: int | None
    calls: int
    kernels: tuple[Kernel, ...]
    depth: int

    @property
    def launches(self) -> int:
        return len(self.kernels) * (self.trips or 1) * self.calls


def _walk(comps, name: str, calls: int, depth: int, loops: list[Loop], top: list[Kernel]) -> None:
    comp = comps[name]
    shapes = {i.name: i.shape for i in comp}
    for ins in comp:
        if ins.op == "while":
            body = re.search(r"body=%?([\w.\-]+)", ins.attrs)
            cond = re.search(r"condition=%?([\w.\-]+)", ins.attrs)
            trips = re.search(r'known_trip_count":\{"n":"(\d+)"', ins.attrs)
            n = int(trips.group(1)) if trips else None
            if body:
                bshapes = {i.name: i.shape for i in comps[body.group(1)]}
                kernels = [_kernel(comps, bshapes, i) for i in comps[body.group(1)] if i.op not in _FREE]
                if cond:
                    cshapes = {i.name: i.shape for i in comps[cond.group(1)]}
                    kernels += [_kernel(comps, cshapes, i) for i in comps[cond.group(1)]
                                if i.op not in _FREE and i.op != "compare" and "compare" not in i.name]
                loops.append(Loop(body.group(1), n, calls, tuple(kernels), depth))
                _walk(comps, body.group(1), calls * (n or 1), depth + 1, loops, [])
        elif ins.op in ("call", "conditional"):
            for callee in re.findall(r"(?:to_apply|branch_computations=\{|true_computation|false_computation)=?"
                                     r"%?([\w.\-]+)", ins.attrs):
                if callee in comps:
                    _walk(comps, callee, calls, depth, loops, top)
        elif ins.op not in _FREE:
            top.append(_kernel(comps, shapes, ins))


@dataclasses.dataclass(frozen=True)
class Program:
    """A driver's program compiled for a target (:func:`jaxattn.aot.compile`), and what its text says.

    Attributes:
        compiled: the ``jax.stages.Compiled`` executable (``.as_text()``: its optimised HLO).
        target: the :class:`~jaxattn.aot.Target` it was compiled for.
        lanes: conditions per block of the run (``Batch(size=...)`` or the target's default width).
        devices: devices the batch is split over.
    """

    compiled: Any
    target: Any
    lanes: int
    devices: int = 1

    def text(self) -> str:
        return self.compiled.as_text()

    def loops(self) -> list[Loop]:
        """Every ``while`` loop, outermost first, with its body's kernels."""
        comps, entry = computations(self.text())
        loops: list[Loop] = []
        _walk(comps, entry, 1, 0, loops, [])
        return loops

    def outside(self) -> list[Kernel]:
        """The kernels of the program outside its loops (run once a call)."""
        comps, entry = computations(self.text())
        top: list[Kernel] = []
        _walk(comps, entry, 1, 0, [], top)
        return top

    def step_loop(self) -> Loop:
        """The loop whose body is one step of the dynamics: of the loops that hold a product, the innermost (a map's
        steps inside its blocks, a solver's vector field inside its steps), and of those the one with the most
        kernels (where a period of observation has its own loop for the observed step)."""
        loops = self.loops()
        if not loops:
            raise ValueError("the program has no loop")
        working = [lp for lp in loops if any(k.kind == "gemm" for k in lp.kernels)] or loops
        deepest = max(lp.depth for lp in working)
        return max((lp for lp in working if lp.depth == deepest), key=lambda lp: len(lp.kernels))

    def kernels_per_step(self) -> int:
        """Kernels in the body of :meth:`step_loop`."""
        return len(self.step_loop().kernels)

    def launches(self) -> int:
        """Kernels launched by one call of the program (every loop at its trip counts, and what lies outside)."""
        return sum(lp.launches for lp in self.loops()) + len(self.outside())

    def by_kind(self) -> Counter:
        """The step loop's kernels counted by kind."""
        return Counter(k.kind for k in self.step_loop().kernels)

    def step_cost(self) -> tuple[int, int, int]:
        """FLOPs, transcendentals and bytes of one pass through the step loop's body."""
        ks = self.step_loop().kernels
        return sum(k.flops for k in ks), sum(k.transcendentals for k in ks), sum(k.bytes for k in ks)

    def roofline(self) -> dict[str, float]:
        """Seconds of one step on the target: ``compute`` (its FLOPs at the float32 peak), ``memory`` (its bytes at
        the memory bandwidth), and ``bound``, the sum over its kernels of the larger of the two (kernels run one
        after the other)."""
        t = self.target
        ks = self.step_loop().kernels
        return {"compute": sum(k.flops for k in ks) / t.peak_flops, "memory": sum(k.bytes for k in ks) / t.bandwidth,
                "bound": sum(max(k.flops / t.peak_flops, k.bytes / t.bandwidth) for k in ks)}
