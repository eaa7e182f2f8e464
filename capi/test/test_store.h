/*
 * test_store.h: an in-process key-value store behind gohccl_store_ops (a
 * locked list and a condition variable), what c10d::Store is to the torch
 * shim, for C tests whose ranks are threads of one process.
 */
#ifndef GOHCCL_TEST_STORE_H
#define GOHCCL_TEST_STORE_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gohccl.h"

struct test_entry {
  char* key;
  uint8_t* value;
  size_t len;
  struct test_entry* next;
};

struct test_store {
  pthread_mutex_t mu;
  pthread_cond_t changed;
  struct test_entry* entries;
};

static void test_store_init(struct test_store* s) {
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->changed, NULL);
  s->entries = NULL;
}

static void test_store_free(struct test_store* s) {
  while (s->entries != NULL) {
    struct test_entry* e = s->entries;
    s->entries = e->next;
    free(e->key);
    free(e->value);
    free(e);
  }
  pthread_cond_destroy(&s->changed);
  pthread_mutex_destroy(&s->mu);
}

static struct test_entry* test_store_find(struct test_store* s, const char* key) {
  for (struct test_entry* e = s->entries; e != NULL; e = e->next) {
    if (strcmp(e->key, key) == 0) {
      return e;
    }
  }
  return NULL;
}

/* test_store_put sets key to a copy of value; the caller holds s->mu. */
static int test_store_put(struct test_store* s, const char* key, const uint8_t* value, size_t len) {
  uint8_t* copy = malloc(len > 0 ? len : 1);
  if (copy == NULL) {
    return -1;
  }
  memcpy(copy, value, len);
  struct test_entry* e = test_store_find(s, key);
  if (e == NULL) {
    e = calloc(1, sizeof(*e));
    if (e == NULL || (e->key = strdup(key)) == NULL) {
      free(e);
      free(copy);
      return -1;
    }
    e->next = s->entries;
    s->entries = e;
  } else {
    free(e->value);
  }
  e->value = copy;
  e->len = len;
  pthread_cond_broadcast(&s->changed);
  return 0;
}

static int test_store_set(void* ctx, const char* key, const uint8_t* value, size_t len, char* err,
                          size_t err_len) {
  struct test_store* s = ctx;
  pthread_mutex_lock(&s->mu);
  int rc = test_store_put(s, key, value, len);
  pthread_mutex_unlock(&s->mu);
  if (rc != 0) {
    snprintf(err, err_len, "test store: out of memory setting %s", key);
  }
  return rc;
}

static int test_store_get(void* ctx, const char* key, int64_t timeout_ms, uint8_t** value, size_t* len,
                          char* err, size_t err_len) {
  struct test_store* s = ctx;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  timeout_ms = timeout_ms > 0 ? timeout_ms : 60000;
  deadline.tv_sec += timeout_ms / 1000;
  deadline.tv_nsec += (timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&s->mu);
  struct test_entry* e;
  while ((e = test_store_find(s, key)) == NULL) {
    if (pthread_cond_timedwait(&s->changed, &s->mu, &deadline) == ETIMEDOUT) {
      pthread_mutex_unlock(&s->mu);
      snprintf(err, err_len, "test store: timed out waiting for %s", key);
      return 1;
    }
  }
  *value = malloc(e->len > 0 ? e->len : 1);
  if (*value != NULL) {
    memcpy(*value, e->value, e->len);
  }
  *len = e->len;
  pthread_mutex_unlock(&s->mu);
  return *value == NULL;
}

/* Integers are stored as decimal text, as c10d stores keep them. */
static int test_store_add(void* ctx, const char* key, int64_t delta, int64_t* out, char* err, size_t err_len) {
  struct test_store* s = ctx;
  char text[32];
  int64_t v = 0;
  pthread_mutex_lock(&s->mu);
  struct test_entry* e = test_store_find(s, key);
  if (e != NULL) {
    size_t n = e->len < sizeof(text) - 1 ? e->len : sizeof(text) - 1;
    memcpy(text, e->value, n);
    text[n] = '\0';
    v = strtoll(text, NULL, 10);
  }
  v += delta;
  int n = snprintf(text, sizeof(text), "%lld", (long long)v);
  int rc = test_store_put(s, key, (const uint8_t*)text, (size_t)n);
  pthread_mutex_unlock(&s->mu);
  if (rc != 0) {
    snprintf(err, err_len, "test store: out of memory adding to %s", key);
    return rc;
  }
  *out = v;
  return 0;
}

static const gohccl_store_ops test_store_ops = {test_store_set, test_store_get, test_store_add};

#endif
