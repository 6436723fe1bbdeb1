// SPDX-License-Identifier: MIT
// Per-thread storage that outlives the thread's C++ thread_local destructors: a thread's call
// storage (LentCall), its caller links, its job fan-out round. A plain `thread_local` object dies
// in the thread's destructor pass, in reverse order of construction, so an application's own
// thread_local whose destructor publishes (or a static Engine whose destructor releases its node
// lease through a script at exit) could reach one that was already destroyed. Here the slot is a
// trivially destructible pointer, and the object is deleted by a pthread key's destructor, which
// glibc runs after every thread_local destructor of the exiting thread (__call_tls_dtors, then the
// keys). The main thread's exit() runs no key destructors: its objects stay valid for the static
// destructors that follow, reachable from its thread pointer until the process ends.
#pragma once

#include <pthread.h>

#include <cstdio>
#include <cstdlib>

namespace echo::engine {

template <class T>
class ThreadOwned {
 public:
  // The calling thread's T, made on first use (and again after a release()). Allocates then.
  static T& get() {
    if (t_ == nullptr) {
      t_ = new T();
      // The key's value is what its destructor deletes; set before anything can fail after it.
      (void)pthread_setspecific(key(), t_);
    }
    return *t_;
  }
  // The calling thread's T if it has one, else nullptr. Never allocates.
  static T* find() noexcept { return t_; }
  // The calling thread gives its T away (its new owner deletes it); the next get() makes another.
  static T* release() noexcept {
    T* p = t_;
    t_ = nullptr;
    (void)pthread_setspecific(key(), nullptr);
    return p;
  }

 private:
  static pthread_key_t key() {
    // A magic static: made once, thread-safe. Out of keys (EAGAIN, PTHREAD_KEYS_MAX in use) the
    // engine cannot keep its per-thread promise: say so and stop, as for a failed allocation.
    static const pthread_key_t k = [] {
      pthread_key_t made{};
      if (pthread_key_create(&made, &ThreadOwned::destroy) != 0) {
        std::fputs("echostore: pthread_key_create failed (out of thread keys)\n", stderr);
        std::abort();
      }
      return made;
    }();
    return k;
  }
  static void destroy(void* p) noexcept {
    // The exiting thread, after its thread_local destructors: nothing of it calls in any more.
    t_ = nullptr;
    delete static_cast<T*>(p);
  }

  static constinit inline thread_local T* t_ = nullptr;
};

}  // namespace echo::engine
