-- Shared head of every permit script (prepended to each; see sem_scripts.rs).
-- KEYS[1]: the semaphore's record (hash: capacity, floor, last token, ver);
-- KEYS[2]: its queue (sorted set: entry id -> token);
-- KEYS[3]: its entries (hash: entry id -> "PERMITS SESSION SINCE_MS OWNER");
-- KEYS[4]: the sessions with entries in it (hash: session id -> deadline, server ms);
-- KEYS[5]: a fair semaphore's fair record (hash: classes, granted, ver; see fair_record.rs),
--          absent on a plain one. An entry of a fair semaphore may carry its tag after the
--          owner: "\nWEIGHT\nCLASS\nFLOW" (names have no control characters).
-- ARGV[1]: the channel told of every change that can decide a waiter.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)

local function int(n)
  return string.format('%.0f', n)
end

-- Removes the entries of every session whose deadline passed (and those sessions); tells
-- waiters when entries went. Sessions are few (one per Limiter), so the check is cheap; the
-- entries are read only when one has expired.
local function prune()
  local sessions = redis.call('HGETALL', KEYS[4])
  local dead, any = {}, false
  for i = 1, #sessions, 2 do
    if tonumber(sessions[i + 1]) < now_ms then
      dead[sessions[i]] = true
      any = true
    end
  end
  if not any then
    return 0
  end
  local entries = redis.call('HGETALL', KEYS[3])
  local gone = 0
  for i = 1, #entries, 2 do
    local session = string.match(entries[i + 1], '^%d+ (%S+)')
    if dead[session] then
      redis.call('ZREM', KEYS[2], entries[i])
      redis.call('HDEL', KEYS[3], entries[i])
      gone = gone + 1
    end
  end
  for session in pairs(dead) do
    redis.call('HDEL', KEYS[4], session)
  end
  if gone > 0 then
    redis.call('PUBLISH', ARGV[1], 'expired')
  end
  return gone
end

-- The queue up to and including token `upto` (all of it for nil), as token, permits pairs.
local function queue_upto(upto)
  local ranked
  if upto then
    ranked = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', int(upto), 'WITHSCORES')
  else
    ranked = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  end
  local out = {}
  if #ranked == 0 then
    return out
  end
  local ids = {}
  for i = 1, #ranked, 2 do
    ids[#ids + 1] = ranked[i]
  end
  local values = redis.call('HMGET', KEYS[3], unpack(ids))
  for i = 1, #ids do
    out[#out + 1] = int(tonumber(ranked[2 * i]))
    out[#out + 1] = values[i] or '0 ? 0 ?'
  end
  return out
end

-- A fair semaphore's record as one reply item: '' on a plain semaphore, else
-- "VER\nCLASSES\nTOKEN TOKEN ...\nVTIMES" (the tokens marked granted, the flows' virtual times
-- as JSON, see fair_record.rs); '!' when the semaphore was
-- created fair (its record says so) but the fair record is gone: never read as plain.
local function fair_item()
  if redis.call('EXISTS', KEYS[5]) == 0 then
    if redis.call('HGET', KEYS[1], 'fair') then
      return '!'
    end
    return ''
  end
  local f = redis.call('HMGET', KEYS[5], 'ver', 'classes', 'granted', 'vtimes')
  return (f[1] or '?') .. '\n' .. (f[2] or '?') .. '\n' .. (f[3] or '') .. '\n' .. (f[4] or '')
end

-- The flows' virtual times (see fair_record.rs) after the uncontended acquire of ARGV[8]'s
-- flow (tag "\nWEIGHT\nCLASS\nFLOW"; none: the flow 'default' of the first class, weight 1)
-- was granted `permits` here, as the rule in Rust would record them: a flow without a recorded
-- time starts one permit ahead of the least served (at 0 if none), then advances by permits ×
-- 1000000 / weight.
local function advance_vtime(permits)
  local raw = redis.call('HGET', KEYS[5], 'vtimes')
  local ok, vt = pcall(cjson.decode, (raw and raw ~= '') and raw or '{}')
  if not ok or type(vt) ~= 'table' then
    vt = {}
  end
  local weight, class, flow = 1, '', 'default'
  if ARGV[8] then
    local w, c, fl = string.match(ARGV[8], '^\n(%d+)\n([^\n]*)\n(.*)$')
    if w then
      weight, class, flow = math.max(tonumber(w), 1), c, fl
    end
  end
  if class == '' then
    local classes = redis.call('HGET', KEYS[5], 'classes') or ''
    class = string.match(classes, '^([^=,]*)') or ''
  end
  local key = class .. '\31' .. flow
  local least = nil
  for _, v in pairs(vt) do
    if type(v) == 'number' and (least == nil or v < least) then
      least = v
    end
  end
  local start = vt[key] or (least and math.max(least - 1000000, 0)) or 0
  vt[key] = start + math.floor(permits * 1000000 / weight)
  -- Integers as JSON integers (cjson writes large numbers with exponents otherwise).
  local parts = {}
  for k, v in pairs(vt) do
    parts[#parts + 1] = cjson.encode(k) .. ':' .. string.format('%d', v)
  end
  return '{' .. table.concat(parts, ',') .. '}'
end

-- The uncontended acquire of a fair semaphore marks itself: when every other entry of `queue`
-- (token, value pairs) is marked, the rule's next grant is entry `token` (the one waiter),
-- granted if its `permits` fit beside the marked ones. Written in this script, so no grant
-- decided from the record's old version can be written after it. Anything else is decided
-- in Rust (fair_grants.rs). Marks of entries gone are dropped on the way.
local function mark_if_alone(queue, token, permits, capacity)
  local f = redis.call('HMGET', KEYS[5], 'ver', 'granted')
  if not tonumber(f[1]) then
    return false
  end
  local marked = {}
  for t in string.gmatch(f[2] or '', '%d+') do
    marked[t] = true
  end
  local used, keep = 0, {}
  for i = 1, #queue, 2 do
    local t = queue[i]
    if marked[t] then
      used = used + (tonumber(string.match(queue[i + 1], '^(%d+) ')) or math.huge)
      keep[#keep + 1] = t
    elseif t ~= token then
      return false
    end
  end
  if used + permits > capacity then
    return false
  end
  keep[#keep + 1] = token
  redis.call('HSET', KEYS[5], 'ver', int(tonumber(f[1]) + 1), 'granted', table.concat(keep, ' '),
    'vtimes', advance_vtime(permits))
  return true
end
