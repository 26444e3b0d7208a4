/* ULFM's recovery, timed as collx's (benchmarks/recovery/figures.sh, "shrink"): every rank
 * loops 1 MiB float allreduces; rank 1 kills itself (SIGKILL) at its 50th; each survivor
 * times from its failed call's end to the end of a correct 1 MiB allreduce on the shrunk
 * communicator (MPIX_Comm_revoke, MPIX_Comm_shrink, the first MPI_Allreduce) and prints
 * "ulfm rank R of S recovered in N ms". With the argument "stop", rank 1 stops itself
 * (SIGSTOP) there instead, having printed "ulfm stopped at T" (T: the wall clock, in
 * seconds), and each survivor prints "ulfm rank R detected at T" when its call fails, before
 * it recovers; rank 0 kills the stopped rank at the end. (ULFM notices a stopped rank only
 * with its heartbeat detector: --mca mpi_ft_detector true, mpi_ft_detector_timeout 10 s by
 * default.) Open MPI 5 with ULFM (Debian 13's 5.0.7):
 *   mpicc -O2 -o ulfm_shrink ulfm_shrink.c
 *   mpirun --with-ft ulfm -np 4 --mca btl tcp,self --mca btl_tcp_if_include lo ./ulfm_shrink
 */
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static double wallClock(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int stop = argc > 1 && strcmp(argv[1], "stop") == 0;
  int* pids = malloc(sizeof(int) * (size_t)size);
  int pid = (int)getpid();
  MPI_Allgather(&pid, 1, MPI_INT, pids, 1, MPI_INT, comm);
  if (stop && rank == 0) { /* (ulfm.sh ends these should the run time out) */
    FILE* f = fopen("ulfm_shrink.pids", "w");
    for (int r = 0; f != NULL && r < size; ++r) fprintf(f, "%d\n", pids[r]);
    if (f != NULL) fclose(f);
  }
  const int n = 262144; /* 1 MiB of float32 */
  float* buf = malloc(sizeof(float) * n);
  /* The shrunk communicator's first allreduce goes on `fresh`, filled now: nothing but the
   * library runs in the timed span (as collx-test-worker's shrink fills its buffer before). */
  float* fresh = malloc(sizeof(float) * n);
  for (int i = 0; i < n; ++i) fresh[i] = 1.0f;
  double failed = 0;
  for (int it = 0;; ++it) {
    for (int i = 0; i < n; ++i) buf[i] = 1.0f;
    if (rank == 1 && it == 50) {
      if (stop) {
        printf("ulfm stopped at %.3f\n", wallClock());
        fflush(stdout);
      }
      raise(stop ? SIGSTOP : SIGKILL);
    }
    if (MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, comm) != MPI_SUCCESS) {
      failed = MPI_Wtime();
      if (stop) {
        printf("ulfm rank %d detected at %.3f\n", rank, wallClock());
        fflush(stdout);
      }
      break;
    }
    if (it > 100000) {
      fprintf(stderr, "rank %d: no failure seen\n", rank);
      return 1;
    }
  }
  MPIX_Comm_revoke(comm);
  MPI_Comm shrunk;
  if (MPIX_Comm_shrink(comm, &shrunk) != MPI_SUCCESS) {
    fprintf(stderr, "rank %d: MPIX_Comm_shrink failed\n", rank);
    return 1;
  }
  MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
  int rc = MPI_Allreduce(MPI_IN_PLACE, fresh, n, MPI_FLOAT, MPI_SUM, shrunk);
  const double took = MPI_Wtime() - failed;
  int newRank, newSize;
  MPI_Comm_rank(shrunk, &newRank);
  MPI_Comm_size(shrunk, &newSize);
  if (rc != MPI_SUCCESS || fresh[0] != (float)newSize || fresh[n - 1] != (float)newSize) {
    fprintf(stderr, "rank %d: the allreduce on the shrunk communicator failed or was wrong\n",
            rank);
    return 1;
  }
  printf("ulfm rank %d of %d recovered in %.1f ms\n", newRank, newSize, took * 1e3);
  fflush(stdout);
  MPI_Barrier(shrunk);
  if (stop && rank == 0) kill(pids[1], SIGKILL);
  _exit(0); /* MPI_Finalize with a dead rank in MPI_COMM_WORLD may wait */
}
