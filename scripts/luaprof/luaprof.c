/* luaprof — where the Lua of kvrouter's Functions library spends its VM instructions, per source line.
 *
 * Redis runs the library inside the server, with no debug library and no profiler: callgrind sees one
 * luaV_execute. luaprof hosts the same Lua 5.1 (Redis's own deps/lua, with its struct, cmsgpack, bit and
 * cjson modules) in a process of its own, loads the library text, and replays recorded FCALLs: each
 * redis.call is sent to a real Redis (hiredis) holding the state the recording started from, so the code
 * takes the same paths it took in the server. A count hook (every VM instruction) charges each one to
 * the (chunk line) it runs on; redis.call and redis.pcall are also counted per calling line. With a 6th
 * argument ("time"), line, call and return hooks charge each line the CPU cycles (rdtsc) until the next
 * event, less the time spent waiting for Redis; a C function's cycles go to the line that called it, and
 * after a return the caller's line is charged again. The C work behind a line (string functions, struct,
 * table growth, GC steps it triggers, the redis.call marshalling on this side) is then counted too, but a
 * timing is noisy.
 *
 * Build and use: scripts/luaprof.sh (needs Redis's source tree built: apt-get source redis; make).
 *
 *   luaprof HOST PORT LIBRARY.lua REPLAY WARMUP [time]
 *
 * REPLAY holds calls as records: u32 argc, then argc × (u32 length, bytes): FCALL's own arguments
 * (function name, numkeys, keys, args). The first WARMUP calls run unprofiled (memos fill as in a warm
 * server). Output (stdout): per line, VM instructions and redis calls per replayed call, sorted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"
#include "hiredis.h"
#ifdef LUAPROF_CALLGRIND
#include <valgrind/callgrind.h>   /* cc -DLUAPROF_CALLGRIND: instrument the focused call alone (valgrind --instr-atstart=no) */
#endif

LUALIB_API int (luaopen_cjson) (lua_State *L);
LUALIB_API int (luaopen_struct) (lua_State *L);
LUALIB_API int (luaopen_cmsgpack) (lua_State *L);
LUALIB_API int (luaopen_bit) (lua_State *L);

#define MAXLINE 8192
static uint64_t vm[MAXLINE], calls[MAXLINE], cyc[MAXLINE];
static int profiling = 0, mode_time = 0, mode_alloc = 0;
/* Alloc mode (LUAPROF_ALLOC=1): the columns count the Lua heap's block allocations and growths (a new
 * table, string, array or node part, a reallocation to a larger size) per line instead of VM
 * instructions: the objects the collector must later sweep and free. cur_line is the line of the VM
 * instruction under way (the count hook runs before each one), so a C function's allocations (a redis.call
 * reply, string.sub) go to the line that called it. */
static int cur_line = 0;
static void *alloc_counting(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  if (nsize == 0) { free(ptr); return NULL; }
  if (profiling && (ptr == NULL || nsize > osize) && cur_line > 0) vm[cur_line]++;
  return realloc(ptr, nsize);
}
static redisContext *rc;
/* Time mode: the cycles from one line event to the next are the previous line's, less the time spent
 * waiting for Redis inside them (redis_cyc: a round trip is not Lua work). */
static int last_line = 0;
static uint64_t last_tsc = 0, redis_cyc = 0;

static inline uint64_t tsc(void) { unsigned lo, hi; __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi)); return (uint64_t)hi << 32 | lo; }

static void charge(uint64_t now) {
  if (last_line > 0 && last_tsc) cyc[last_line] += (now - last_tsc) - redis_cyc;
  redis_cyc = 0;
}

static void hook(lua_State *L, lua_Debug *ar) {
  if (!profiling) return;
  if (mode_time) {
    uint64_t now = tsc();
    charge(now);
    if (ar->event == LUA_HOOKLINE) {
      last_line = lua_getinfo(L, "l", ar) && ar->currentline > 0 && ar->currentline < MAXLINE ? ar->currentline : 0;
    } else if (ar->event == LUA_HOOKRET || ar->event == LUA_HOOKTAILRET) {
      /* back in the caller, on the line that called: what it does with the results is its own. */
      lua_Debug up;
      if (lua_getstack(L, 1, &up) && lua_getinfo(L, "l", &up) && up.currentline > 0 && up.currentline < MAXLINE)
        last_line = up.currentline;
    } else if (ar->event == LUA_HOOKCALL) {
      /* a C function's work is its calling line's (last_line stays); a Lua function's lines report themselves. */
      lua_getinfo(L, "S", ar);
      if (ar->what[0] != 'C') last_line = 0;
    }
    last_tsc = tsc();
    return;
  }
  if (lua_getinfo(L, "l", ar) && ar->currentline > 0 && ar->currentline < MAXLINE) {
    if (mode_alloc) cur_line = ar->currentline; else vm[ar->currentline]++;
  }
}

static void push_reply(lua_State *L, redisReply *r) {
  switch (r->type) {
  case REDIS_REPLY_INTEGER: lua_pushnumber(L, (lua_Number)r->integer); break;
  case REDIS_REPLY_STRING: lua_pushlstring(L, r->str, r->len); break;
  case REDIS_REPLY_NIL: lua_pushboolean(L, 0); break;
  case REDIS_REPLY_STATUS:
    lua_newtable(L); lua_pushstring(L, "ok"); lua_pushlstring(L, r->str, r->len); lua_settable(L, -3); break;
  case REDIS_REPLY_ERROR:
    lua_newtable(L); lua_pushstring(L, "err"); lua_pushlstring(L, r->str, r->len); lua_settable(L, -3); break;
  case REDIS_REPLY_ARRAY:
    lua_newtable(L);
    for (size_t i = 0; i < r->elements; i++) { push_reply(L, r->element[i]); lua_rawseti(L, -2, (int)i + 1); }
    break;
  default: lua_pushboolean(L, 0);
  }
}

/* redis.call / redis.pcall: arguments as Redis converts them (numbers with %.17g, as script_lua.c). */
static int do_call(lua_State *L, int raise) {
  int argc = lua_gettop(L);
  const char *argv[1024];
  size_t argl[1024];
  char nums[1024][32];
  if (argc < 1 || argc > 1024) return luaL_error(L, "luaprof: bad argument count");
  for (int i = 0; i < argc; i++) {
    if (lua_type(L, i + 1) == LUA_TNUMBER) {
      argl[i] = (size_t)snprintf(nums[i], sizeof nums[i], "%.17g", lua_tonumber(L, i + 1));
      argv[i] = nums[i];
    } else if (lua_type(L, i + 1) == LUA_TSTRING) {
      argv[i] = lua_tolstring(L, i + 1, &argl[i]);
    } else {
      return luaL_error(L, "Lua redis lib command arguments must be strings or integers");
    }
  }
  if (profiling) {
    lua_Debug ar;
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "l", &ar) && ar.currentline > 0 && ar.currentline < MAXLINE)
      calls[ar.currentline]++;
  }
  uint64_t t0 = tsc();
  redisReply *r = redisCommandArgv(rc, argc, argv, argl);
  redis_cyc += tsc() - t0;
  if (!r) return luaL_error(L, "luaprof: redis: %s", rc->errstr);
  if (r->type == REDIS_REPLY_ERROR && raise) {
    lua_pushlstring(L, r->str, r->len);
    freeReplyObject(r);
    return lua_error(L);
  }
  push_reply(L, r);
  freeReplyObject(r);
  return 1;
}
static int r_call(lua_State *L) { return do_call(L, 1); }
static int r_pcall(lua_State *L) { return do_call(L, 0); }

/* op_name: a function name without its "kvr<layout>_<digest>_" prefix, so a recording made with one build
 * replays on another (the digest changes with every script change). */
static void op_name(const char *s, size_t n, const char **out, size_t *outn) {
  const char *p = memchr(s, '_', n);
  const char *q = p ? memchr(p + 1, '_', n - (size_t)(p + 1 - s)) : NULL;
  if (q) { *out = q + 1; *outn = n - (size_t)(q + 1 - s); } else { *out = s; *outn = n; }
}

/* redis.register_function{function_name = n, callback = f, flags = ...}: FUNCS[op_name(n)] = f. */
static int r_register(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, LUA_REGISTRYINDEX, "FUNCS");
  lua_getfield(L, 1, "function_name");
  size_t n;
  const char *name = lua_tolstring(L, -1, &n), *op;
  size_t opn;
  op_name(name, n, &op, &opn);
  lua_pushlstring(L, op, opn);
  lua_remove(L, -2);
  lua_getfield(L, 1, "callback");
  lua_settable(L, -3);
  return 0;
}
static int r_reply(lua_State *L, const char *field) {
  lua_newtable(L); lua_pushstring(L, field); lua_pushvalue(L, 1); lua_settable(L, -3); return 1;
}
static int r_error_reply(lua_State *L) { return r_reply(L, "err"); }
static int r_status_reply(lua_State *L) { return r_reply(L, "ok"); }
static int r_log(lua_State *L) { (void)L; return 0; }

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(2); }
  fseek(f, 0, SEEK_END); long len = ftell(f); fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)len + 1);
  if (fread(b, 1, (size_t)len, f) != (size_t)len) { perror(path); exit(2); }
  fclose(f); b[len] = 0; *n = (size_t)len;
  return b;
}

static uint32_t rd32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

int main(int argc, char **argv) {
  if (argc != 6 && argc != 7) { fprintf(stderr, "usage: luaprof HOST PORT LIBRARY.lua REPLAY WARMUP [time]\n"); return 2; }
  mode_time = argc == 7;
  rc = redisConnect(argv[1], atoi(argv[2]));
  if (!rc || rc->err) { fprintf(stderr, "luaprof: connect: %s\n", rc ? rc->errstr : "?"); return 2; }
  int warm = atoi(argv[5]);
  mode_alloc = !mode_time && getenv("LUAPROF_ALLOC") && atoi(getenv("LUAPROF_ALLOC"));
  lua_State *L = mode_alloc ? lua_newstate(alloc_counting, NULL) : luaL_newstate();
  lua_pushcfunction(L, luaopen_base); lua_call(L, 0, 0);
  lua_pushcfunction(L, luaopen_table); lua_pushstring(L, LUA_TABLIBNAME); lua_call(L, 1, 0);
  lua_pushcfunction(L, luaopen_string); lua_pushstring(L, LUA_STRLIBNAME); lua_call(L, 1, 0);
  lua_pushcfunction(L, luaopen_math); lua_pushstring(L, LUA_MATHLIBNAME); lua_call(L, 1, 0);
  lua_pushcfunction(L, luaopen_cjson); lua_pushstring(L, "cjson"); lua_call(L, 1, 0);
  lua_pushcfunction(L, luaopen_struct); lua_pushstring(L, "struct"); lua_call(L, 1, 0);
  lua_pushcfunction(L, luaopen_cmsgpack); lua_pushstring(L, "cmsgpack"); lua_call(L, 1, 0);
  lua_pushcfunction(L, luaopen_bit); lua_pushstring(L, "bit"); lua_call(L, 1, 0);
  lua_newtable(L); lua_setfield(L, LUA_REGISTRYINDEX, "FUNCS");
  lua_newtable(L);
  lua_pushcfunction(L, r_call); lua_setfield(L, -2, "call");
  lua_pushcfunction(L, r_pcall); lua_setfield(L, -2, "pcall");
  lua_pushcfunction(L, r_register); lua_setfield(L, -2, "register_function");
  lua_pushcfunction(L, r_error_reply); lua_setfield(L, -2, "error_reply");
  lua_pushcfunction(L, r_status_reply); lua_setfield(L, -2, "status_reply");
  lua_pushcfunction(L, r_log); lua_setfield(L, -2, "log");
  lua_pushnumber(L, 0); lua_setfield(L, -2, "LOG_DEBUG");
  lua_pushnumber(L, 1); lua_setfield(L, -2, "LOG_VERBOSE");
  lua_pushnumber(L, 2); lua_setfield(L, -2, "LOG_NOTICE");
  lua_pushnumber(L, 3); lua_setfield(L, -2, "LOG_WARNING");
  lua_setglobal(L, "redis");

  size_t n;
  char *lib = slurp(argv[3], &n);
  char *body = lib;
  if (strncmp(body, "#!", 2) == 0) { body = strchr(body, '\n'); if (!body) return 2; }   /* the shebang line */
  /* A blank first line keeps line numbers equal to the library file's. */
  if (body != lib) *body = '\n';
  if (luaL_loadbuffer(L, body, strlen(body), "=lib") || lua_pcall(L, 0, 0, 0)) {
    fprintf(stderr, "luaprof: library: %s\n", lua_tostring(L, -1)); return 1;
  }
  if (mode_time) lua_sethook(L, hook, LUA_MASKLINE | LUA_MASKCALL | LUA_MASKRET, 0); else lua_sethook(L, hook, LUA_MASKCOUNT, 1);

  /* LUAPROF_PERCALL=file: each replayed call's total (VM instructions or cycles, and redis calls), one line
   * per call; LUAPROF_FOCUS=k: profile call k alone (0-based), e.g. the slowest one of a PERCALL run. */
  FILE *percall = getenv("LUAPROF_PERCALL") ? fopen(getenv("LUAPROF_PERCALL"), "w") : NULL;
  long focus = getenv("LUAPROF_FOCUS") ? atol(getenv("LUAPROF_FOCUS")) : -1;
  size_t rn;
  unsigned char *rp = (unsigned char *)slurp(argv[4], &rn), *end = rp + rn;
  long done = 0, profiled = 0;
  while (rp + 4 <= end) {
    uint32_t na = rd32(rp); rp += 4;
    const char *a[2048]; size_t al[2048];
    if (na < 2 || na > 2048) { fprintf(stderr, "luaprof: bad record\n"); return 2; }
    for (uint32_t i = 0; i < na; i++) { al[i] = rd32(rp); rp += 4; a[i] = (const char *)rp; rp += al[i]; }
    int nk = atoi(a[1]);
    lua_getfield(L, LUA_REGISTRYINDEX, "FUNCS");
    const char *op;
    size_t opn;
    op_name(a[0], al[0], &op, &opn);
    lua_pushlstring(L, op, opn);
    lua_gettable(L, -2);
    if (!lua_isfunction(L, -1)) { fprintf(stderr, "luaprof: no function %.*s\n", (int)al[0], a[0]); return 2; }
    lua_newtable(L);
    for (int i = 0; i < nk; i++) { lua_pushlstring(L, a[2 + i], al[2 + i]); lua_rawseti(L, -2, i + 1); }
    lua_newtable(L);
    for (uint32_t i = 2 + (uint32_t)nk; i < na; i++) { lua_pushlstring(L, a[i], al[i]); lua_rawseti(L, -2, (int)(i - 1 - (uint32_t)nk)); }
    profiling = focus >= 0 ? done == focus : done >= warm;
    uint64_t before_v = 0, before_c = 0;
    if (percall) {
      for (int i = 0; i < MAXLINE; i++) { before_v += (mode_time ? cyc[i] : vm[i]); before_c += calls[i]; }
    }
    last_line = 0; last_tsc = 0; redis_cyc = 0;
#ifdef LUAPROF_CALLGRIND
    if (done == focus) CALLGRIND_START_INSTRUMENTATION;
#endif
    if (lua_pcall(L, 2, 1, 0)) { fprintf(stderr, "luaprof: call %ld: %s\n", done, lua_tostring(L, -1)); return 1; }
    cur_line = 0;   /* the next call's KEYS and ARGV tables are Redis's work, not a line's */
#ifdef LUAPROF_CALLGRIND
    if (done == focus) CALLGRIND_STOP_INSTRUMENTATION;
#endif
    if (profiling && mode_time) charge(tsc());
    if (percall) {
      uint64_t after_v = 0, after_c = 0;
      for (int i = 0; i < MAXLINE; i++) { after_v += (mode_time ? cyc[i] : vm[i]); after_c += calls[i]; }
      fprintf(percall, "%ld\t%.*s\t%llu\t%llu\n", done, (int)al[0], a[0], (unsigned long long)(after_v - before_v),
              (unsigned long long)(after_c - before_c));
    }
    lua_pop(L, 2);
    if (profiling) profiled++;
    done++;
  }
  uint64_t tv = 0, tc = 0;
  if (mode_time) memcpy(vm, cyc, sizeof vm);   /* report cycles in the same columns */
  for (int i = 0; i < MAXLINE; i++) { tv += vm[i]; tc += calls[i]; }
  printf("# luaprof: %ld calls replayed, %ld profiled; per profiled call: %.1f %s, %.2f redis calls\n",
         done, profiled, (double)tv / (double)(profiled ? profiled : 1),
         mode_time ? "cycles (rdtsc, Redis round trips excluded)" : mode_alloc ? "heap allocations and growths" : "VM instructions", (double)tc / (double)(profiled ? profiled : 1));
  printf("# line\tvm/call\tshare\tredis/call\n");
  for (int i = 0; i < MAXLINE; i++)
    if (vm[i] || calls[i])
      printf("%d\t%.2f\t%.4f\t%.3f\n", i, (double)vm[i] / (double)profiled, (double)vm[i] / (double)tv, (double)calls[i] / (double)profiled);
  return 0;
}
