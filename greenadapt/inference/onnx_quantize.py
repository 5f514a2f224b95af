"""int8 whose answer for a sentence depends on that sentence alone: activations quantized per row (per token).

ONNX Runtime's dynamic quantization takes one scale and zero point over a whole activation tensor ``[batch, length,
hidden]`` (``DynamicQuantizeLinear``): a token's int8 values then depend on every other token of the batch, padding
included, so a sentence's entities changed with its neighbours and with the entry point (issue 85: 89% of sentences
the same between two entry points). Here each ``DynamicQuantizeLinear`` of the quantized graph is replaced by a
per-row symmetric quantization: a token's scale is its own largest magnitude over 127, its zero point the constant
128 (uint8, what the CPU's VNNI/AMX int8 products take); a GELU's output, never below -0.17, is quantized around a zero
point of 32 instead, its scale the larger of the row's max/223 and -min/32 (finer steps where the feed-forward's
outliers are). The weights stay ONNX Runtime's (int8 per output channel); each
product is ONNX Runtime's ``MatMulIntegerToFloat`` (a ``com.microsoft`` operator, which every ONNX Runtime has, the
exported serve_onnx.py's included), followed by the rows' scales.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROW_LIMIT = 127.0  # symmetric: -127..127 around the zero point, so the row's largest magnitude is exact
ZERO_POINT = 128  # uint8: the operand type of the CPU's u8 x s8 int8 products
# A GELU's output is never below -0.17 and has a long positive tail in a few channels (the outliers): around a
# zero point of 32 it gets 223 steps above zero and 32 below, each row's scale the larger of max/223 and -min/32, where
# the symmetric form spends half its 255 steps on the short negative side. A row whose largest value is over 0.67 gets
# finer steps; the rows' scales stay their own, so the batch still never matters.
GELU_ZERO_POINT = 32
SMALLEST_SCALE = 1e-12  # a row of zeros (never one of a real sentence): any scale gives it zeros


def quantize_per_row(fp32: Path, out: Path, *, large: bool = False) -> None:
    """``fp32``'s graph quantized to int8 at ``out``: weights int8 per output channel (ONNX Runtime's dynamic
    quantization), activations per row."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, per_channel=True, use_external_data_format=large)
    model = onnx.load(str(out))
    try:
        per_row_activations(model)
    except ValueError as error:  # another ONNX Runtime's quantizer wrote another graph: never served per tensor instead
        import onnxruntime

        from greenadapt.errors import UsageError

        raise UsageError(f"ONNX Runtime {onnxruntime.__version__}'s quantizer wrote a graph greenadapt cannot quantize per token "
                         f"({error})", hint="use --quantize none, or the ONNX Runtime of greenadapt[onnx]") from None
    onnx.save(model, str(out), save_as_external_data=large, all_tensors_to_one_file=True, location=out.name + ".data")


def per_row_activations(model: Any) -> int:
    """Each ``DynamicQuantizeLinear`` of ``model`` replaced, in place, by its per-row form; returns how many.

    Each product it fed (``MatMulInteger``, then ``Cast`` and the ``Mul`` by the two scales) becomes ONNX Runtime's
    ``MatMulIntegerToFloat`` with the weights' scales and an activation scale of 1, then a ``Mul`` by the rows' scales,
    under the old ``Mul``'s output name: the fused kernel takes one activation scale, so the rows' are applied after it."""
    from onnx import helper

    graph = model.graph
    readers: dict[str, list[Any]] = {}
    producers = {name: node for node in graph.node for name in node.output if node.op_type != "Constant"}
    initializers = {tensor.name for tensor in graph.initializer} | {name for node in graph.node if node.op_type == "Constant"
                                                                    for name in node.output}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    dropped: set[int] = set()
    replaced: dict[int, list[Any]] = {}
    count = 0
    for node in graph.node:
        if node.op_type != "DynamicQuantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        count += 1
        (x,), (quantized, activation_scale, zero_point) = node.input, node.output
        name = node.name or quantized

        def step(suffix: str, name: str = name) -> str:
            return f"{name}/per_row/{suffix}"

        nodes, constants = _row_quantization(x, quantized, zero_point, step, one_sided=_after_gelu(x, producers, initializers))
        replaced[id(node)] = nodes
        graph.initializer.extend(constants)
        for product in readers.get(quantized, []):
            cast, rescale, scales = _rescaling_of(product, readers, activation_scale)
            weights_scale = next(name for name in scales.input if name != activation_scale)
            fused = helper.make_node("MatMulIntegerToFloat", [quantized, product.input[1], step("one"), weights_scale, zero_point,
                                                              product.input[3]],
                                     [f"{rescale.output[0]}/unscaled"], name=f"{product.name}/ToFloat", domain="com.microsoft")
            rows = helper.make_node("Mul", [f"{rescale.output[0]}/unscaled", step("scale")], [rescale.output[0]],
                                    name=f"{product.name}/RowScale")
            replaced[id(product)] = [fused, rows]
            dropped.update({id(cast), id(rescale), id(scales)})
    nodes = [replacement for node in graph.node if id(node) not in dropped for replacement in replaced.get(id(node), [node])]
    del graph.node[:]
    graph.node.extend(nodes)
    if count and not any(entry.domain == "com.microsoft" for entry in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return count


def _row_quantization(x: str, quantized: str, zero_point: str, step: Any, *, one_sided: bool) -> tuple[list[Any], list[Any]]:
    """The nodes that quantize ``x`` into ``quantized`` row by row (each row's scale from its own max and min), and
    their constants; ``one_sided``: around :data:`GELU_ZERO_POINT` (a GELU's output), else symmetric around 128."""
    from onnx import TensorProto, helper

    zero, above, below = (GELU_ZERO_POINT, 255.0 - GELU_ZERO_POINT,
                          float(GELU_ZERO_POINT)) if one_sided else (ZERO_POINT, ROW_LIMIT, ROW_LIMIT)
    nodes = [
        helper.make_node("ReduceMax", [x], [step("max")], name=step("ReduceMax"), axes=[-1], keepdims=1),
        helper.make_node("ReduceMin", [x], [step("min")], name=step("ReduceMin"), axes=[-1], keepdims=1),
        helper.make_node("Div", [step("max"), step("above")], [step("upper")], name=step("Upper")),
        helper.make_node("Div", [step("min"), step("below")], [step("lower")], name=step("Lower")),
        helper.make_node("Neg", [step("lower")], [step("negated")], name=step("Neg")),
        helper.make_node("Max", [step("upper"), step("negated"), step("smallest")], [step("scale")], name=step("Scale")),
        helper.make_node("Reciprocal", [step("scale")], [step("inverse")], name=step("Inverse")),
        # a product by the row's inverse, not a division by its scale: a division is several times slower on a CPU
        helper.make_node("Mul", [x, step("inverse")], [step("scaled")], name=step("Mul")),
        helper.make_node("QuantizeLinear", [step("scaled"), step("one"), zero_point], [quantized], name=step("Quantize")),
    ]
    constants = [
        helper.make_tensor(step("smallest"), TensorProto.FLOAT, [], [SMALLEST_SCALE]),
        helper.make_tensor(step("above"), TensorProto.FLOAT, [], [above]),
        helper.make_tensor(step("below"), TensorProto.FLOAT, [], [below]),
        helper.make_tensor(step("one"), TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor(zero_point, TensorProto.UINT8, [], [zero]),
    ]
    return nodes, constants


def _after_gelu(name: str, producers: dict[str, Any], initializers: set[str]) -> bool:
    """Whether ``name`` is a GELU's output, x·Φ(x): a ``Gelu`` node's, or a tree of products (three deep: the exporter
    writes x·½·(1 + erf(x/√2))) whose factors are constants, one 1 + erf(·) or 1 + tanh(·), and the one tensor that
    function's argument is made from. Any other factor (a gated GELU's gate, gelu(a)·b, which can be far below zero) or a
    bare tanh (a pooler's) keeps the symmetric form."""
    node = producers.get(name)
    if node is None:
        return False
    if node.op_type in ("Gelu", "FastGelu"):
        return True
    if node.op_type != "Mul":
        return False
    factors = [factor for factor in _factors(name, producers, depth=3) if factor not in initializers]
    squashed = [_one_plus_squashing(factor, producers, initializers) for factor in factors]
    if len(factors) != 2 or sum(found is not None for found in squashed) != 1:
        return False
    squashing, x = (squashed[0], factors[1]) if squashed[0] is not None else (squashed[1], factors[0])
    return x in _argument_sources(squashing.input[0], producers, initializers)


def _factors(name: str, producers: dict[str, Any], depth: int) -> list[str]:
    """The tensors whose product ``name`` is, through up to ``depth`` ``Mul`` nodes."""
    node = producers.get(name)
    if node is None or node.op_type != "Mul" or depth == 0:
        return [name]
    return [factor for source in node.input for factor in _factors(source, producers, depth - 1)]


def _one_plus_squashing(name: str, producers: dict[str, Any], initializers: set[str]) -> Any:
    """The ``Erf`` or ``Tanh`` node when ``name`` is a constant plus its output (1 + erf(·)), else None."""
    node = producers.get(name)
    if node is None or node.op_type != "Add" or sum(source in initializers for source in node.input) != 1:
        return None
    (other,) = [source for source in node.input if source not in initializers]
    squashing = producers.get(other)
    return squashing if squashing is not None and squashing.op_type in ("Erf", "Tanh") else None


def _argument_sources(name: str, producers: dict[str, Any], initializers: set[str], depth: int = 4) -> set[str]:
    """The tensors an argument is made of through a few divisions, products, sums and powers (x/√2; k(x + 0.044715x³))."""
    found = {name}
    node = producers.get(name)
    if node is not None and depth > 0 and node.op_type in ("Div", "Mul", "Add", "Pow"):
        for source in node.input:
            if source not in initializers:
                found |= _argument_sources(source, producers, initializers, depth - 1)
    return found


def _rescaling_of(product: Any, readers: dict[str, list[Any]], activation_scale: str) -> tuple[Any, Any, Any]:
    """The quantizer's nodes after ``MatMulInteger`` ``product``: the ``Cast`` to float, the ``Mul`` by the scales, and
    the ``Mul`` that makes those scales from the activation's (``activation_scale``) and the weights'."""
    if product.op_type != "MatMulInteger":
        raise ValueError(f"{product.name}: the quantized activation feeds {product.op_type}, not MatMulInteger")
    (cast,) = readers[product.output[0]]
    (rescale,) = readers[cast.output[0]]
    if cast.op_type != "Cast" or rescale.op_type != "Mul":
        raise ValueError(f"{product.name}: not followed by Cast and Mul ({cast.op_type}, {rescale.op_type})")
    scales = [reader for reader in readers[activation_scale] if reader.op_type == "Mul" and reader.output[0] in rescale.input]
    if len(scales) != 1:
        raise ValueError(f"{product.name}: its scales are not one Mul of the activation's and the weights'")
    return cast, rescale, scales[0]
