"""The Lua scripts of the Redis state store (one round trip each); see ``state/redis.py`` and
``state/redis_mirror.py``.

Keys (``P`` = ``state.key_prefix``, which ends with ``:``):

- ``Pidx:<endpoint>``: sorted set, member = 8-byte block hash (or affinity hash), score = the
  wall time in ms it was last sent there. A prompt's blocks are written with scores decreasing
  along the prompt (head newest; ``ZADD GT``: a score only moves up), so trimming the lowest ranks evicts tails first and the set
  stays prefix-closed, as the in-memory LRU does. Trimmed to the endpoint's capacity on every
  write; expires ``index_ttl`` after its last write.
- ``Pinflight:<replica>``: hash, endpoint -> that replica's in-flight count; expires
  ``in_flight_ttl`` after its last heartbeat, so a crashed replica's counts vanish.
- ``Plive``: sorted set of replicas by last heartbeat (ms); members older than the in-flight TTL
  are pruned.
- ``Pchanges``: stream, one entry per :data:`WRITE` call: fields ``s`` (the sequence number from
  ``Pseq``, +1 per entry), ``r`` (the writing replica), then the call's operations, 6 fields
  each, as field/value pairs. Trimmed (``MINID ~``) to ``change_retention`` by Redis's clock;
  expires ``index_ttl`` after the last write, like ``Pseq``. Mirrors (``state/redis_mirror.py``)
  read it with :data:`SYNC`; a jump in ``s`` tells a reader it missed entries (then it reloads).

The scripts touch keys they compute, so they need a standalone Redis (or keys in one slot).
"""

LOOKUP = """
local p, me, now, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local blob, aff, n = ARGV[5], ARGV[6], tonumber(ARGV[7])
local names, fields = {}, {}
for i = 1, n do
  names[i] = ARGV[7 + i]
  fields[#fields + 1] = ARGV[7 + i]
  fields[#fields + 1] = ARGV[7 + n + i]
end
local mine = p .. 'inflight:' .. me
if n > 0 then redis.call('HSET', mine, unpack(fields)) end
redis.call('PEXPIRE', mine, ttl)
local live = p .. 'live'
redis.call('ZADD', live, now, me)
redis.call('ZREMRANGEBYSCORE', live, '-inf', now - ttl)
redis.call('PEXPIRE', live, ttl)
local load = {}
for i = 1, n do load[i] = 0 end
if n > 0 then
  for _, replica in ipairs(redis.call('ZRANGE', live, 0, -1)) do
    if replica ~= me then
      local counts = redis.call('HMGET', p .. 'inflight:' .. replica, unpack(names))
      for i = 1, n do load[i] = load[i] + (tonumber(counts[i]) or 0) end
    end
  end
end
local members = {}
for i = 1, #blob, 8 do members[#members + 1] = string.sub(blob, i, i + 7) end
local count = #members
local matched, affinity = {}, {}
for i = 1, n do
  local key = p .. 'idx:' .. names[i]
  local m = 0
  if count > 0 and redis.call('ZSCORE', key, members[1]) then
    if redis.call('ZSCORE', key, members[count]) then
      m = count
    else
      local lo, hi = 2, count
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if redis.call('ZSCORE', key, members[mid]) then lo = mid + 1 else hi = mid end
      end
      m = lo - 1
    end
  end
  matched[i] = m
  if aff ~= '' and redis.call('ZSCORE', key, aff) then affinity[i] = 1 else affinity[i] = 0 end
end
return {matched, affinity, load}
"""
"""ARGV: prefix, replica, now_ms, in_flight_ttl_ms, blocks (8 bytes each), affinity (8 bytes or
empty), n, n endpoint names, n in-flight counts of this replica. Returns {matched, affinity, load}
(load: other live replicas' in-flight, per endpoint)."""

WRITE = """
local p, ttl, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local replica, retention = ARGV[4], tonumber(ARGV[5])
local at = 6
if n > 0 then
  local seq = redis.call('INCR', p .. 'seq')
  redis.call('PEXPIRE', p .. 'seq', ttl)
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - retention
  local changes = p .. 'changes'
  redis.call('XADD', changes, 'MINID', '~', floor, '*', 's', seq, 'r', replica, unpack(ARGV, 6, 5 + 6 * n))
  redis.call('PEXPIRE', changes, ttl)
end
for _ = 1, n do
  local kind, endpoint, cap, blob, aff = ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2]), ARGV[at + 3], ARGV[at + 4]
  local now = tonumber(ARGV[at + 5])
  at = at + 6
  local key = p .. 'idx:' .. endpoint
  if kind == 'c' then
    redis.call('DEL', key)
  else
    if kind == 'r' then
      local count = #blob / 8
      local args = {}
      for i = 1, count do
        args[#args + 1] = now + (count - i + 1) / (count + 2)
        args[#args + 1] = string.sub(blob, (i - 1) * 8 + 1, i * 8)
      end
      if aff ~= '' then
        args[#args + 1] = now + 1
        args[#args + 1] = aff
      end
      if #args > 0 then redis.call('ZADD', key, 'GT', unpack(args)) end
      redis.call('ZREMRANGEBYSCORE', key, '-inf', now - ttl)
    end
    local size = redis.call('ZCARD', key)
    if size > cap then redis.call('ZREMRANGEBYRANK', key, 0, size - cap - 1) end
    if size > 0 then redis.call('PEXPIRE', key, ttl) end
  end
end
return n
"""
"""ARGV: prefix, index_ttl_ms, n, replica, change_retention_ms, then n operations of 6 fields: kind (``r`` record, ``k`` apply
capacity, ``c`` clear), endpoint, capacity, blocks, affinity, time (ms; strictly increasing per
replica, so a later record always ranks above an earlier one)."""

SYNC = """
local p, me, now, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local after, limit, n = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local mine = p .. 'inflight:' .. me
if n > 0 then
  local fields = {}
  for i = 1, n do
    fields[#fields + 1] = ARGV[7 + i]
    fields[#fields + 1] = ARGV[7 + n + i]
  end
  redis.call('HSET', mine, unpack(fields))
end
redis.call('PEXPIRE', mine, ttl)
local live = p .. 'live'
redis.call('ZADD', live, now, me)
redis.call('ZREMRANGEBYSCORE', live, '-inf', now - ttl)
redis.call('PEXPIRE', live, ttl)
local sums, names = {}, {}
for _, replica in ipairs(redis.call('ZRANGE', live, 0, -1)) do
  if replica ~= me then
    local counts = redis.call('HGETALL', p .. 'inflight:' .. replica)
    for i = 1, #counts, 2 do
      local name, count = counts[i], tonumber(counts[i + 1]) or 0
      if sums[name] == nil then names[#names + 1] = name; sums[name] = 0 end
      sums[name] = sums[name] + count
    end
  end
end
local load = {}
for _, name in ipairs(names) do
  load[#load + 1] = name
  load[#load + 1] = sums[name]
end
local entries = {}
if after ~= '' then entries = redis.call('XRANGE', p .. 'changes', '(' .. after, '+', 'COUNT', limit) end
return {load, entries, tonumber(redis.call('GET', p .. 'seq') or '0')}
"""
"""ARGV: prefix, replica, now_ms, in_flight_ttl_ms, the last stream id read ('' = none: no
entries), at most how many entries, n, n endpoint names, n in-flight counts of this replica.
Publishes this replica's counts (its heartbeat) and returns {load, entries, seq}: load = flat
name, count pairs summed over the other live replicas; entries = ``Pchanges`` after that id;
seq = the current ``Pseq`` (0 when gone)."""

HEAD = """
local seq = tonumber(redis.call('GET', ARGV[1] .. 'seq') or '0')
local last = redis.call('XREVRANGE', ARGV[1] .. 'changes', '+', '-', 'COUNT', 1)
local id = '0-0'
if #last > 0 then id = last[1][1] end
return {seq, id}
"""
"""ARGV: prefix. Returns {seq, the id of the stream's newest entry ('0-0' when empty)}: where a
reload (a snapshot of every index) starts reading the stream."""
