#include "fork_guard.h"

#include <pthread.h>

#include <atomic>

namespace flowtune::client {
namespace {

std::atomic<std::uint64_t> g_generation{0};
// Shields in force, and forks waiting for them to end: a fork holds
// g_shield_lock from its prepare handler to its parent and child handlers,
// once no shield is in force, and new shields wait while a fork is pending,
// so clients opening in a loop cannot starve it. A mutex and counts rather
// than a read-write lock: glibc's write lock cannot be released in the
// child (its owner is the parent's thread id).
pthread_mutex_t g_shield_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_shields_done = PTHREAD_COND_INITIALIZER;
pthread_cond_t g_fork_done = PTHREAD_COND_INITIALIZER;
int g_shields = 0;
int g_forks_pending = 0;

void before_fork() {
  (void)pthread_mutex_lock(&g_shield_lock);
  ++g_forks_pending;
  while (g_shields > 0) (void)pthread_cond_wait(&g_shields_done, &g_shield_lock);
}
void after_fork_in_parent() {
  --g_forks_pending;
  (void)pthread_cond_broadcast(&g_fork_done);
  (void)pthread_mutex_unlock(&g_shield_lock);
}
void after_fork_in_child() {
  // Held by the forking thread, the child's only one; no shield is in force
  // and no other fork pending here (their threads do not exist). The
  // condition variables may have had waiters in the parent: made anew.
  g_forks_pending = 0;
  g_shields = 0;
  (void)pthread_cond_init(&g_shields_done, nullptr);
  (void)pthread_cond_init(&g_fork_done, nullptr);
  (void)pthread_mutex_unlock(&g_shield_lock);
  g_generation.fetch_add(1, std::memory_order_relaxed);
}

__attribute__((constructor)) void register_fork_handlers() {
  (void)pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

}  // namespace

std::uint64_t fork_generation() { return g_generation.load(std::memory_order_relaxed); }

ForkShield::ForkShield() {
  (void)pthread_mutex_lock(&g_shield_lock);
  while (g_forks_pending > 0) (void)pthread_cond_wait(&g_fork_done, &g_shield_lock);
  ++g_shields;
  (void)pthread_mutex_unlock(&g_shield_lock);
}

ForkShield::~ForkShield() {
  (void)pthread_mutex_lock(&g_shield_lock);
  if (--g_shields == 0) (void)pthread_cond_broadcast(&g_shields_done);
  (void)pthread_mutex_unlock(&g_shield_lock);
}

}  // namespace flowtune::client
