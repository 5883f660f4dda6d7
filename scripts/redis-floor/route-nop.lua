-- route-nop.lua — a `kvrouter bench route --route-script /dev/null:scripts/redis-floor/route-nop.lua` body
-- that decides nothing: a fixed 'ok' reply in route's shape (statestore's Redis.Route parses it), so the run
-- times kvrouter's client path (statestore, rueidis, the benchmark's generator) with next to no Redis work,
-- beside `bench floor --route-fn kvrouter_floor_nop --no-done` (redis-floor.sh OPENLOOP_FLOORS=nopkeys).
-- Use it with --no-done: a done would look for a lease this route never booked.
return {'ok', 'w-0', 0, 'http://127.0.0.1:1/w0', 0, 64, '1', 0, 0}
