/* Two ranks, one process each, on host memory (no GPU needed): each rank writes a
 * greeting into the next rank's memory, waits at a barrier, and checks the greeting
 * the previous rank wrote into its own.
 *
 * Run as (a fresh store directory per job):
 *   DIR=/dev/shm/two-ranks-$$; ./two_ranks $DIR 0 & ./two_ranks $DIR 1; wait; rm -rf $DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmwin.h"

#define WORLD 2
#define HOST_MEMORY (-1) /* a CUDA device number instead puts the memory there */
#define GROUP "two-ranks"
#define BYTES (1 << 20)

/* Every call returns a status; on failure this thread's last error says who failed,
 * in which phase and why. */
static int failed(int rank, const char *call, SymmwinStatus status) {
  fprintf(stderr, "rank %d: %s: status %d: %s\n", rank, call, (int)status,
          symmwin_last_error());
  return 1;
}

#define CHECK(call)                                   \
  do {                                                \
    SymmwinStatus status_ = (call);                   \
    if (status_ != SYMMWIN_OK) {                      \
      return failed(rank, #call, status_);            \
    }                                                 \
  } while (0)

static int run(const char *store_dir, int rank) {
  /* Checks the SYMMWIN_* settings now rather than at the first rendezvous. */
  CHECK(symmwin_init());

  /* Where the ranks meet: a directory both can reach. The group owns the store from
   * here on, whatever symmwin_group_init returns. */
  SymmwinStore store;
  CHECK(symmwin_file_store(store_dir, &store));
  CHECK(symmwin_group_init(GROUP, HOST_MEMORY, rank, WORLD, NULL, 0, store));

  /* Zero-filled memory of this rank, then the collective rendezvous that maps every
   * rank's allocation here: each rank calls it, in the same order. */
  char *mine = NULL;
  CHECK(symmwin_alloc(HOST_MEMORY, BYTES, (void **)&mine));
  SymmwinWindow *window = NULL;
  SymmwinStatus status =
      symmwin_rendezvous(mine, GROUP, HOST_MEMORY, SYMMWIN_DEFAULT_PAD_SIZE, &window);
  if (status == SYMMWIN_NOT_FOUND) {
    fprintf(stderr, "rank %d: the buffer is not a symmwin allocation\n", rank);
    return 1;
  }
  CHECK(status);

  /* The next rank's buffer, mapped in this process: plain stores reach its memory. */
  int next = (rank + 1) % WORLD, previous = (rank + WORLD - 1) % WORLD;
  char *theirs = NULL;
  CHECK(symmwin_window_peer_ptr(window, SYMMWIN_BUFFER_PTRS, next, (void **)&theirs));
  snprintf(theirs, BYTES, "hello from rank %d", rank);

  /* Every rank signals every rank, then waits for all: their writes are visible. */
  CHECK(symmwin_window_signal(window, SYMMWIN_SIGNAL_BARRIER, 0, 0, 0, NULL));
  char expected[64];
  snprintf(expected, sizeof expected, "hello from rank %d", previous);
  if (strcmp(mine, expected) != 0) {
    fprintf(stderr, "rank %d: found \"%.63s\", expected \"%s\"\n", rank, mine, expected);
    return 1;
  }
  printf("rank %d: \"%s\"\n", rank, mine);

  /* Teardown, each step local: the window, the memory, the group (and its store),
   * and this process's socket files. */
  symmwin_window_release(window);
  CHECK(symmwin_free(mine));
  symmwin_release_groups(GROUP);
  symmwin_remove_sockets();
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[2], "0") != 0 && strcmp(argv[2], "1") != 0)) {
    fprintf(stderr, "usage: %s STORE_DIR RANK (RANK: 0 or 1)\n", argv[0]);
    return 2;
  }
  return run(argv[1], atoi(argv[2]));
}
