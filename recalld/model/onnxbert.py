"""The embedder's forward pass as an ONNX graph run by onnxruntime, built from the very arrays
recalld.model.embed reads out of the safetensors (no converted model file to ship or keep in
step).

The graph is embed.Encoder._forward op for op: embeddings + LayerNorm, post-norm layers with
the padded keys' bias, exact-erf GELU, mean pooling over the real tokens and an L2 norm, so
the float32 graph's vectors are the numpy pass's to float32 rounding (the int8 one's close to
them). Why a second runtime for the same arithmetic: one prompt's embedding is many small
matrix products, and numpy pays for each temporary and call where onnxruntime runs one planned
graph (docs/evaluation.md, "The query embedding: numpy or onnxruntime").
Without onnxruntime (or onnx, which writes the graph) the numpy pass runs.
"""

import math


def session(enc, threads: int = 1, int8: bool = False):
    """An onnxruntime session of `enc`'s weights (`threads` intra-op threads, as the numpy
    pass has BLAS threads), or None when onnxruntime or onnx is not installed. `int8`: its
    dense layers' products in 8-bit integers (`linear`), for a faster prompt embedding at a
    small distance from the float32 vectors (docs/evaluation.md, "The query embedding")."""
    try:
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    count = [0]

    def op(kind, ins, **kw):
        count[0] += 1
        out = f"t{count[0]}"
        nodes.append(helper.make_node(kind, ins, [out], **kw))
        return out

    def linear(x, name, w, b):
        """x @ w + b; with `int8`, in integers: w per output column (quantize_columns), each
        token's row of x symmetric per row, so a text's vector does not depend on the batch it
        is embedded in (one scale per tensor would let a padded batch-mate move it)."""
        if not int8:
            return op("Add", [op("MatMul", [x, const(name, w)]), const(name + "_b", b)])
        wq, ws = quantize_columns(w)
        s = op("Max", [op("Div", [op("ReduceMax", [op("Abs", [x])], axes=[-1], keepdims=1), q127]), tiny])
        # uint8 with a zero point of 128 for every row: the integer product's fast kernel takes a
        # uint8 left side and one zero point; the rows' own scales are applied after it
        qx = op("Cast", [op("Add", [op("Round", [op("Div", [x, s])]), f128])], to=TensorProto.UINT8)
        y = op("Cast", [op("MatMulInteger", [qx, const(name, wq), zp128])], to=TensorProto.FLOAT)
        return op("Add", [op("Mul", [op("Mul", [y, s]), const(name + "_s", ws)]), const(name + "_b", b)])

    if int8:
        q127 = const("q127", np.array(127.0, np.float32))
        tiny = const("tiny", np.array(1e-12, np.float32))
        f128 = const("f128", np.array(128.0, np.float32))
        zp128 = const("zp128", np.array(128, np.uint8))

    d, h = enc.dim, enc.heads
    dh = d // h
    x = op("Gather", [const("word", enc.word), "ids"])
    n = op("Shape", ["ids"], start=1, end=2)
    pos = op("Slice", [const("pos", enc.pos), const("zero", np.array([0], np.int64)), n,
                       const("axis0", np.array([0], np.int64))])
    x = op("Add", [op("Add", [x, pos]), const("type0", enc.type0)])
    x = op("LayerNormalization", [x, const("ln0_w", enc.ln0[0]), const("ln0_b", enc.ln0[1])], axis=-1,
           epsilon=1e-12)
    split = const("shape_qkv", np.array([0, 0, 3, h, dh], np.int64))
    merge = const("shape_ctx", np.array([0, 0, d], np.int64))
    scale = const("scale", np.array(1 / math.sqrt(dh), np.float32))
    r2 = const("r2", np.array(1 / math.sqrt(2), np.float32))
    one = const("one", np.array(1, np.float32))
    half = const("half", np.array(0.5, np.float32))
    axis2 = const("axis2", np.array([2], np.int64))
    for i, (qkv_w, qkv_b, o_w, o_b, l1w, l1b, i_w, i_b, f_w, f_b, l2w, l2b) in enumerate(enc.layers):
        qkv = op("Reshape", [linear(x, f"qkv_w{i}", qkv_w, qkv_b), split])
        q, k, v = (op("Squeeze", [op("Gather", [qkv, const(f"pick{i}_{j}", np.array([j], np.int64))], axis=2), axis2])
                   for j in range(3))
        q = op("Transpose", [q], perm=[0, 2, 1, 3])
        k = op("Transpose", [k], perm=[0, 2, 3, 1])
        v = op("Transpose", [v], perm=[0, 2, 1, 3])
        att = op("Softmax", [op("Add", [op("Mul", [op("MatMul", [q, k]), scale]), "bias"])], axis=-1)
        ctx = op("Reshape", [op("Transpose", [op("MatMul", [att, v])], perm=[0, 2, 1, 3]), merge])
        y = op("Add", [linear(ctx, f"o_w{i}", o_w, o_b), x])
        x = op("LayerNormalization", [y, const(f"ln1_w{i}", l1w), const(f"ln1_b{i}", l1b)], axis=-1, epsilon=1e-12)
        up = linear(x, f"i_w{i}", i_w, i_b)
        gelu = op("Mul", [op("Mul", [up, op("Add", [op("Erf", [op("Mul", [up, r2])]), one])]), half])
        y = op("Add", [linear(gelu, f"f_w{i}", f_w, f_b), x])
        x = op("LayerNormalization", [y, const(f"ln2_w{i}", l2w), const(f"ln2_b{i}", l2b)], axis=-1, epsilon=1e-12)
    axis1 = const("axis1", np.array([1], np.int64))
    total = op("ReduceSum", [op("Mul", [x, "mask"]), axis1], keepdims=0)
    real = op("ReduceSum", ["mask", axis1], keepdims=0)
    nodes.append(helper.make_node("LpNormalization", [op("Div", [total, op("Max", [real, one])])], ["out"],
                                  axis=-1, p=2))
    graph = helper.make_graph(
        nodes, "recalld-embedder",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "n"]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["b", 1, 1, "n"]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["b", "n", 1])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["b", d])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    # No arena: it would keep a backfill batch's peak (attention is batch x heads x n x n) for the
    # daemon's life, and a prompt's embedding does not need it (docs/evaluation.md, "The query
    # embedding")
    opts.enable_cpu_mem_arena = False
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    del model, graph, inits, nodes, data
    return sess


# Weights in 7 bits: on a CPU without VNNI the uint8 x int8 product adds pairs in 16 bits
# (VPMADDUBSW), and 2 x 255 x 63 is the largest pair that cannot saturate there.
WEIGHT_LEVELS = 63


def quantize_columns(w):
    """(int8 weights, float32 scale per column) for `w` (in, out): symmetric, each output
    column's largest magnitude at WEIGHT_LEVELS, so the integer product needs no weight zero
    point."""
    import numpy as np

    scale = np.abs(w).max(axis=0) / WEIGHT_LEVELS
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    return np.clip(np.rint(w / scale), -WEIGHT_LEVELS, WEIGHT_LEVELS).astype(np.int8), scale


def trim() -> None:
    """Give the heap that building a session freed back to the system (glibc keeps it)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
