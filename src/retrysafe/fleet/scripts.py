"""The Lua scripts a RedisFleet runs: each one atomic, each one round trip.

Every time is Redis's own clock (``TIME``), in milliseconds, so hosts whose clocks
disagree still agree on when a cooldown or an open period ends; replies carry
remaining milliseconds, which each process adds to its own monotonic clock.
Integers in replies are whole milliseconds (microseconds for pacing waits).

Keys (``ns`` is the namespace, ``dep`` the dependency name):
``ns:pace:dep`` the pacing schedule (GCRA's theoretical arrival time);
``ns:cool:dep`` when the fleet cooldown ends; ``ns:open:dep`` a hash, the fleet
breaker (absent: closed; ``until`` past: half-open); ``ns:probe:dep`` the half-open
probe's lease; ``ns:votes:dep`` a sorted set of voters by time; ``ns:alive`` a sorted
set of processes by their last heartbeat. Changes are published on ``ns:changed``.
"""

from __future__ import annotations

__all__ = [
    "ACQUIRE_PROBE",
    "COOLDOWN",
    "PACE",
    "REFRESH",
    "RELEASE_PACE",
    "RELEASE_PROBE",
    "REPORT_PROBE",
    "RETRACT",
    "VOTE",
]

_NOW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
"""

#: Reserve a paced slot (GCRA with reservations). KEYS: pace. ARGV: interval ms, burst,
#: longest wait ms, and (optional) a wait ms the slot must lie beyond. Returns {wait in
#: microseconds, the slot's name}, or {-1, ""} when the queue is full: a slot further than
#: the longest wait is not reserved (the caller must not send); {-2, ""} when the slot
#: lies within the optional wait: not reserved either (a retry takes it after its wait).
#: The slot's name is the schedule's end it set (ms, as a number's text): RELEASE_PACE
#: gives it back only while it is still the end.
PACE = (
    _NOW
    + """
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local next_tat = tat + interval
local wait = next_tat - burst * interval - now
if wait < 0 then wait = 0 end
if wait > tonumber(ARGV[3]) then return {-1, ''} end
if ARGV[4] and wait <= tonumber(ARGV[4]) then return {-2, ''} end
local name = tostring(next_tat)
redis.call('SET', KEYS[1], name, 'PX', math.ceil(next_tat - now) + 1000)
return {math.floor(wait * 1000), name}
"""
)

#: Give a reserved slot back. KEYS: pace, gaps. ARGV: interval ms, the slot's name as a
#: number ("": the last one). The schedule's last slot goes back; one with others reserved
#: behind it is kept in gaps (giving it back would put the next caller on the last one's
#: slot) until every slot behind it has gone back too, and goes back with them, or its
#: time comes. (Slots are an interval apart: a gap is the schedule's new end when it is
#: within a quarter of one.)
RELEASE_PACE = (
    _NOW
    + """
local interval = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat <= now then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if ARGV[2] ~= '' and math.abs(tat - tonumber(ARGV[2])) > 0.000001 then
  redis.call('ZADD', KEYS[2], tonumber(ARGV[2]), ARGV[2])
  redis.call('PEXPIRE', KEYS[2], math.ceil(tat - now) + 1000)
  return 0
end
local back = tat - interval
while back > now do
  local gap = redis.call('ZRANGEBYSCORE', KEYS[2], back - interval / 4, back + interval / 4,
    'LIMIT', 0, 1)
  if #gap == 0 then break end
  redis.call('ZREM', KEYS[2], gap[1])
  back = back - interval
end
if back < now then back = now end
redis.call('SET', KEYS[1], tostring(back), 'PX', math.ceil(back - now) + 1000)
return 1
"""
)

#: Start (or extend) the fleet cooldown. KEYS: cool. ARGV: ms, channel, dependency.
#: The announcement carries it: ``cool <ms> <dependency>``.
COOLDOWN = (
    _NOW
    + """
local ms = tonumber(ARGV[1])
local ends = now + ms
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if ends <= current then return 0 end
redis.call('SET', KEYS[1], tostring(ends), 'PX', math.ceil(ms))
redis.call('PUBLISH', ARGV[2], 'cool ' .. math.floor(ms) .. ' ' .. ARGV[3])
return 1
"""
)

#: One process votes that the dependency fails; opens the fleet breaker on a quorum.
#: KEYS: votes, alive, open. ARGV: process, vote window ms, alive ms, quorum, share,
#: open ms, keep ms (how long a half-open state nobody probes is kept), channel, dep.
#: Returns {opened (0/1), ms the breaker stays open (-1: closed), voters, needed}. The
#: open hash keeps the period (``period``, ms) for a failed probe to double.
VOTE = (
    _NOW
    + """
local ends_at = tonumber(redis.call('HGET', KEYS[3], 'until') or '-1')
if ends_at >= 0 then return {0, math.floor(ends_at - now), 0, 0} end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])))
local voters = redis.call('ZCARD', KEYS[1])
local alive = redis.call('ZCOUNT', KEYS[2], now - tonumber(ARGV[3]), '+inf')
if alive < voters then alive = voters end
local needed = math.min(tonumber(ARGV[4]), math.ceil(tonumber(ARGV[5]) * alive))
if needed < 2 then needed = 2 end
if voters < needed then return {0, -1, voters, needed} end
local open_ms = tonumber(ARGV[6])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[3], 'until', tostring(now + open_ms), 'period', tostring(open_ms))
redis.call('PEXPIRE', KEYS[3], math.ceil(open_ms + tonumber(ARGV[7])))
redis.call('PUBLISH', ARGV[8], ARGV[9])
return {1, math.floor(open_ms), voters, needed}
"""
)

#: A process saw the dependency answer well again: its vote no longer stands.
#: KEYS: votes. ARGV: process.
RETRACT = """
return redis.call('ZREM', KEYS[1], ARGV[1])
"""

#: Ask for the half-open probe. KEYS: open, probe. ARGV: token, lease ms.
#: Returns {kind, ms}: 0 closed, 1 open (ms left), 2 granted, 3 busy (ms of the lease left).
ACQUIRE_PROBE = (
    _NOW
    + """
local ends_at = tonumber(redis.call('HGET', KEYS[1], 'until') or '-1')
if ends_at < 0 then return {0, 0} end
if now < ends_at then return {1, math.floor(ends_at - now)} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', math.ceil(tonumber(ARGV[2]))) then
  return {2, 0}
end
return {3, redis.call('PTTL', KEYS[2])}
"""
)

#: The probe's outcome. KEYS: open, probe, votes. ARGV: token, healthy (1/0), open ms (a
#: Retry-After's; -1: twice the last period), the doubling's ceiling ms, keep ms, channel,
#: dep. Returns {1, ms the breaker opened for again (0: it closed)}, or {0, 0} when the
#: token no longer holds the lease. A failed probe doubles the period as a local breaker
#: does: the first (the quorum's vote asked for it) 0.5 s, then 1, 2, 4 s ... up to the
#: ceiling (``open_for``); a hash with no period (written before it kept one) doubles
#: from the ceiling, which it keeps.
REPORT_PROBE = (
    _NOW
    + """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {0, 0} end
redis.call('DEL', KEYS[2])
local open_ms = 0
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[1], KEYS[3])
else
  open_ms = tonumber(ARGV[3])
  if open_ms < 0 then
    local ceiling = tonumber(ARGV[4])
    local last = tonumber(redis.call('HGET', KEYS[1], 'period') or tostring(ceiling))
    open_ms = math.min(ceiling, 2 * last)
  end
  redis.call('HSET', KEYS[1], 'until', tostring(now + open_ms), 'period', tostring(open_ms))
  redis.call('PEXPIRE', KEYS[1], math.ceil(open_ms + tonumber(ARGV[5])))
end
redis.call('PUBLISH', ARGV[6], ARGV[7])
return {1, math.floor(open_ms)}
"""
)

#: Give back a probe that ended with no outcome. KEYS: probe. ARGV: token.
RELEASE_PROBE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

#: Heartbeat, then read the state of some dependencies. KEYS: alive, then a cool and an
#: open key per dependency. ARGV: process, alive ms. Returns {processes alive, then per
#: dependency: cooldown ms left (0: none), open ms left (-1: closed; <= 0: half-open)}.
REFRESH = (
    _NOW
    + """
local alive_ms = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 10 * alive_ms)
redis.call('PEXPIRE', KEYS[1], math.ceil(10 * alive_ms))
local reply = {redis.call('ZCOUNT', KEYS[1], now - alive_ms, '+inf')}
for i = 2, #KEYS, 2 do
  local cool = tonumber(redis.call('GET', KEYS[i]) or '0') - now
  if cool < 0 then cool = 0 end
  local ends_at = redis.call('HGET', KEYS[i + 1], 'until')
  local open = -1
  if ends_at then
    open = math.floor(tonumber(ends_at) - now)
    if open < 0 then open = 0 end
  end
  reply[#reply + 1] = math.ceil(cool)
  reply[#reply + 1] = open
end
return reply
"""
)
