// Compiles and links against the installed collx::mpi component.
#include <collx/mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  auto context = collx::initFromMpi(MPI_COMM_WORLD);
  int ok = context->size() >= 1 ? 0 : 1;
  context.reset();
  MPI_Finalize();
  return ok;
}
