// Settings the API declares for code outside libcollx, and the typo check. The PyTorch
// backend is a Python extension that collx-info does not load: its setting lives here, where
// collx-info, the typo check (Config::unknownVariables) and collx.config() see it, and the
// backend reads it through this declaration.
#pragma once

#include "collx/base/setting.h"

namespace collx {

// COLLX_TORCH_EAGER_BYTES: the largest call the PyTorch backend runs on the calling thread.
extern const Setting<kind::Bytes> kTorchEagerBytes;
// COLLX_TORCH_SPLIT: whether the PyTorch backend makes sub-groups by splitting the default
// group's context (Context::split) instead of joining each afresh; unset: automatic (split
// unless the sub-group's ranks share one host, where a context of their own has a
// shared-memory group).
extern const AutoSetting<kind::Bool> kTorchSplit;
// COLLX_SPLIT_SHM: whether a split of ranks that share memory gets a shared-memory group.
extern const Setting<kind::Bool> kSplitSharedMemory;

// Warns, once per process, of each COLLX_* variable in the environment that is not a setting
// (Config::unknownVariables: likely a typo, with the closest name). Every context does, and
// collx-run. It lives in libcollx, whose dependencies hold every layer's settings, so that
// none is taken for a typo in a program that links only some of the layers.
void warnUnknownVariables();

}  // namespace collx
