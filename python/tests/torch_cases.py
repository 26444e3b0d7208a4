"""The cases of test_torch_backend: each torch.distributed op through backend collx against
the same op through backend gloo on identical inputs (where gloo 1.13 lacks the op, against
what gloo's all_reduce / all_gather compute). Names only: no torch import here."""

ALL_REDUCE_TYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32",
                    "int64"]
TYPES = ["float32", "bfloat16", "int64"]
OPS = ["all_gather", "all_gather_uneven", "all_gather_into_tensor", "reduce_scatter",
       "reduce_scatter_tensor", "broadcast", "reduce", "gather", "scatter", "all_to_all",
       "all_to_all_single", "all_to_all_single_splits", "send_recv", "all_reduce_coalesced"]

CASES = (["all_reduce-%s" % t for t in ALL_REDUCE_TYPES] +
         ["%s-%s" % (op, t) for op in OPS for t in TYPES] +
         ["all_reduce-complex64", "barrier", "async_work", "dropped_work", "future",
          "non_contiguous", "unsupported_dtype_moves_as_bytes"])
