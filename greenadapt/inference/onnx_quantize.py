"""int8 whose answer for a sentence depends on that sentence alone: activations quantized per row (per token).

ONNX Runtime's dynamic quantization takes one scale and zero point over a whole activation tensor ``[batch, length,
hidden]`` (``DynamicQuantizeLinear``): a token's int8 values then depend on every other token of the batch, padding
included, so a sentence's entities changed with its neighbours and with the entry point (issue 85: 89% of sentences
the same between two entry points). Here each ``DynamicQuantizeLinear`` of the quantized graph is replaced by a
per-row symmetric quantization: a token's scale is its own largest magnitude over 127, its zero point the constant
128 (uint8, what the CPU's VNNI/AMX int8 products take). The weights stay ONNX Runtime's (int8 per output channel); each
product is ONNX Runtime's ``MatMulIntegerToFloat`` (a ``com.microsoft`` operator, which every ONNX Runtime has, the
exported serve_onnx.py's included), followed by the rows' scales.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROW_LIMIT = 127.0  # symmetric: -127..127 around the zero point, so the row's largest magnitude is exact
ZERO_POINT = 128  # uint8: the operand type of the CPU's u8 x s8 int8 products
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
    from onnx import TensorProto, helper

    graph = model.graph
    readers: dict[str, list[Any]] = {}
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

        replaced[id(node)] = [
            helper.make_node("ReduceMax", [x], [step("max")], name=step("ReduceMax"), axes=[-1], keepdims=1),
            helper.make_node("ReduceMin", [x], [step("min")], name=step("ReduceMin"), axes=[-1], keepdims=1),
            helper.make_node("Neg", [step("min")], [step("negated")], name=step("Neg")),
            helper.make_node("Max", [step("max"), step("negated"), step("smallest")], [step("largest")], name=step("Max")),
            helper.make_node("Div", [step("largest"), step("limit")], [step("scale")], name=step("Scale")),
            helper.make_node("Div", [step("limit"), step("largest")], [step("inverse")], name=step("Inverse")),
            # a product by the row's inverse, not a division by its scale: a division is several times slower on a CPU
            helper.make_node("Mul", [x, step("inverse")], [step("scaled")], name=step("Mul")),
            helper.make_node("QuantizeLinear", [step("scaled"), step("one"), zero_point], [quantized], name=step("Quantize")),
        ]
        graph.initializer.extend([
            helper.make_tensor(step("smallest"), TensorProto.FLOAT, [], [SMALLEST_SCALE * ROW_LIMIT]),
            helper.make_tensor(step("limit"), TensorProto.FLOAT, [], [ROW_LIMIT]),
            helper.make_tensor(step("one"), TensorProto.FLOAT, [], [1.0]),
            helper.make_tensor(zero_point, TensorProto.UINT8, [], [ZERO_POINT]),
        ])
        for product in readers.get(quantized, []):
            cast, rescale, scales = _rescaling_of(product, readers, activation_scale)
            weights_scale = next(name for name in scales.input if name != activation_scale)
            fused = helper.make_node("MatMulIntegerToFloat", [quantized, product.input[1], step("one"), weights_scale, zero_point,
                                                              product.input[3]],
                                     [f"{rescale.output[0]}/unscaled"], name=f"{product.name}/ToFloat", domain="com.microsoft")
            rows = helper.make_node("Mul", [f"{rescale.output[0]}/unscaled", step("scale")], [rescale.output[0]], name=f"{product.name}/RowScale")
            replaced[id(product)] = [fused, rows]
            dropped.update({id(cast), id(rescale), id(scales)})
    nodes = [replacement for node in graph.node if id(node) not in dropped for replacement in replaced.get(id(node), [node])]
    del graph.node[:]
    graph.node.extend(nodes)
    if count and not any(entry.domain == "com.microsoft" for entry in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return count


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
