// Harness: every registered COLLX_* setting (every layer is linked, as in collx-info) read
// from a fuzzed value through valueText, and the typo check with the value as a variable's
// name. Input: a byte choosing the setting, then the value.
#include <string>
#include <vector>

#include "collx/base/setting.h"
#include "fuzz.h"

namespace {

// Settings of each layer, so that a library the linker dropped is noticed instead of
// fuzzing fewer settings quietly.
void checkEveryLayerIsLinked() {
  static const bool kChecked = [] {
    for (const char* name : {"COLLX_TIMEOUT", "COLLX_STORE", "COLLX_JOB_SECRET", "COLLX_RULES",
                             "COLLX_TCP_STREAMS", "COLLX_SHM_RING_BYTES", "COLLX_TRACE"}) {
      if (collx::findSetting(name) == nullptr) __builtin_trap();
    }
    return true;
  }();
  (void)kChecked;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  checkEveryLayerIsLinked();
  if (size == 0) return 0;
  // The first byte picks the setting (one per input: the fuzzer learns each one's parser),
  // the rest is its value.
  static const std::vector<const collx::SettingInfo*> kAll = collx::settings();
  const collx::SettingInfo* setting = kAll[data[0] % kAll.size()];
  const std::string text(collx::fuzz::textOf(data + 1, size - 1));
  const collx::Config config(collx::Config::Environment{{setting->name(), text}});
  collx::fuzz::refusedOrParsed(
      [&] {
        const std::string value = setting->valueText(config);
        // What valueText says, written back, reads the same (a secret shows nothing).
        if (!setting->hidden() && !value.empty() && setting->isSet(config)) {
          const collx::Config again(collx::Config::Environment{{setting->name(), value}});
          if (setting->valueText(again) != value) __builtin_trap();
        }
      },
      /*maxMessage=*/1024);
  // Whatever the error, a secret's value is not in it.
  if (setting->hidden() && text.size() >= 8) {
    try {
      setting->valueText(config);
    } catch (const collx::Error& e) {
      if (std::string_view(e.what()).find(text) != std::string_view::npos) __builtin_trap();
    }
  }
  // The text as a variable's name, for one input in four: the typo check computes its edit
  // distance to every setting's name (most of the harness's time when done for every input).
  if (size <= 48 && data[0] % 4 == 0) {
    const collx::Config named(collx::Config::Environment{{"COLLX_" + text, "1"}});
    (void)named.unknownVariables();
  }
  return 0;
}
