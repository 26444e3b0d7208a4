// Uses the installed collx: a store, a joined context of one, and an error.
#include <collx/collx.h>

#include <iostream>

int main() {
  auto store = std::make_shared<collx::rendezvous::HashStore>();
  auto context = collx::Context::create(store, 0, 1);
  store->set("greeting", "hello");
  std::cout << "consumer: rank " << context->rank() << " of " << context->size() << ", collx "
            << collx::versionString() << ", " << collx::rendezvous::toString(store->get("greeting"))
            << "\n";
  try {
    collx::ReduceOp(collx::ReduceOpKind::kBxor)
        .validate(collx::DataType::kFloat32, {0, "demo", -1});
  } catch (const collx::InvalidArgument& e) {
    std::cout << "consumer: caught " << e.what() << "\n";
    return 0;
  }
  return 1;
}
