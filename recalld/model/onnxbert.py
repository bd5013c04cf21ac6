"""The embedder's forward pass as an ONNX graph run by onnxruntime, built from the very arrays
recalld.model.embed reads out of the safetensors (no converted model file to ship or keep in
step).

The graph is embed.Encoder._forward op for op: embeddings + LayerNorm, post-norm layers with
the padded keys' bias, exact-erf GELU, mean pooling over the real tokens and an L2 norm, so
its vectors are the numpy pass's to float32 rounding. Why a second runtime for the same
arithmetic: one prompt's embedding is many small matrix products, and numpy pays for each
temporary and call where onnxruntime runs one planned graph in one buffer arena, faster at
every load measured (docs/evaluation.md, "The query embedding: numpy or onnxruntime").
Without onnxruntime (or onnx, which writes the graph) the numpy pass runs, as before.
"""

import math


def session(enc, threads: int = 1):
    """An onnxruntime session of `enc`'s weights (`threads` intra-op threads, as the numpy
    pass has BLAS threads), or None when onnxruntime or onnx is not installed."""
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
        qkv = op("Reshape", [op("Add", [op("MatMul", [x, const(f"qkv_w{i}", qkv_w)]), const(f"qkv_b{i}", qkv_b)]),
                             split])
        q, k, v = (op("Squeeze", [op("Gather", [qkv, const(f"pick{i}_{j}", np.array([j], np.int64))], axis=2), axis2])
                   for j in range(3))
        q = op("Transpose", [q], perm=[0, 2, 1, 3])
        k = op("Transpose", [k], perm=[0, 2, 3, 1])
        v = op("Transpose", [v], perm=[0, 2, 1, 3])
        att = op("Softmax", [op("Add", [op("Mul", [op("MatMul", [q, k]), scale]), "bias"])], axis=-1)
        ctx = op("Reshape", [op("Transpose", [op("MatMul", [att, v])], perm=[0, 2, 1, 3]), merge])
        y = op("Add", [op("Add", [op("MatMul", [ctx, const(f"o_w{i}", o_w)]), const(f"o_b{i}", o_b)]), x])
        x = op("LayerNormalization", [y, const(f"ln1_w{i}", l1w), const(f"ln1_b{i}", l1b)], axis=-1, epsilon=1e-12)
        up = op("Add", [op("MatMul", [x, const(f"i_w{i}", i_w)]), const(f"i_b{i}", i_b)])
        gelu = op("Mul", [op("Mul", [up, op("Add", [op("Erf", [op("Mul", [up, r2])]), one])]), half])
        y = op("Add", [op("Add", [op("MatMul", [gelu, const(f"f_w{i}", f_w)]), const(f"f_b{i}", f_b)]), x])
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
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    del model, graph, inits, nodes
    return sess


def trim() -> None:
    """Give the heap that building a session freed back to the system (glibc keeps it)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
