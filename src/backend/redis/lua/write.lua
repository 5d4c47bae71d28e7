-- Conditional writes of rate-limit keys of one bucket (one hash slot), in one step.
-- KEYS[1]: the bucket's copy of the quotas (a hash: limit -> "VERSION:QUOTA");
-- KEYS[1 + i]: the key of write i ("VERSION:STATE").
-- ARGV[1]: "joint" (all or none) or "each" (each on its own); ARGV[2]: how many groups; then
-- three per group (writes of one limit decided with one quota version, in key order): the
-- limit, that version, how many writes; then three per write: expected key version ("" =
-- must be absent), new state, and when Redis may drop the key (unix ms: expiry plus grace).
-- A new key's version is the server's time in microseconds, so a key deleted and written
-- again never repeats a version an old client may still hold.
-- Returns, per write: the new version (written); or 0, the quota copy and the key as found
-- (not written; false where absent); or, "each" only, -1 and why the key is unusable (a
-- foreign value or type), so one bad key fails alone rather than its batch-mates.
-- Redis time goes mostly to redis.call and to arguments, so a limit's copy is read once per
-- call, its name and version sent once, and a key expected absent is one SET NX.
local call = redis.call
local joint = ARGV[1] == 'joint'
local groups = tonumber(ARGV[2])
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_s = string.format('%.0f', now)

local function version(s)
  local sep = string.find(s, ':', 1, true)
  return sep and tonumber(string.sub(s, 1, sep - 1))
end

local function foreign(what)
  return 'FOREIGN ' .. what .. ' holds a value clusterlimit did not write'
end

-- Each write's quota copy and whether it is the version decided with, read before any write
-- (a foreign copy fails the call).
local copy, fits = {}, {}
local n = 0
for g = 0, groups - 1 do
  local limit = ARGV[3 + g * 3]
  local c = call('HGET', KEYS[1], limit)
  local ok = c and (version(c) or error({err = foreign('the quota copy of ' .. limit)}))
    == tonumber(ARGV[4 + g * 3])
  for _ = 1, tonumber(ARGV[5 + g * 3]) do
    n = n + 1
    copy[n], fits[n] = c, ok
  end
end
local first = 3 + groups * 3

local out, o = {}, 0
local function refused(i, key)
  out[o + 1], out[o + 2], out[o + 3] = 0, copy[i], key
  o = o + 3
end

if joint then
  local found, all = {}, true
  for i = 1, n do
    local a = first + (i - 1) * 3
    local key = call('GET', KEYS[1 + i])
    local v = key and (version(key) or error({err = foreign(KEYS[1 + i])}))
    found[i] = key
    local want = ARGV[a]
    all = all and fits[i] and (want == '' and not v or v == tonumber(want))
  end
  for i = 1, n do
    local a = first + (i - 1) * 3
    if all then
      local v = found[i] and version(found[i]) + 1 or now
      call('SET', KEYS[1 + i], string.format('%.0f', v) .. ':' .. ARGV[a + 1], 'PXAT', ARGV[a + 2])
      o = o + 1
      out[o] = v
    else
      refused(i, found[i])
    end
  end
  return out
end

for i = 1, n do
  local a = first + (i - 1) * 3
  local k, want = KEYS[1 + i], ARGV[a]
  local done = false
  if fits[i] then
    if want == '' then
      done = call('SET', k, now_s .. ':' .. ARGV[a + 1], 'NX', 'PXAT', ARGV[a + 2]) and now
    else
      local key = redis.pcall('GET', k)
      local v = type(key) == 'string' and version(key)
      if v and v == tonumber(want) then
        v = v + 1
        call('SET', k, string.format('%.0f', v) .. ':' .. ARGV[a + 1], 'PXAT', ARGV[a + 2])
        done = v
      end
    end
  end
  if done then
    o = o + 1
    out[o] = done
  else
    local key = redis.pcall('GET', k)
    if type(key) == 'table' then
      out[o + 1], out[o + 2] = -1, key.err
      o = o + 2
    elseif key and not version(key) then
      out[o + 1], out[o + 2] = -1, foreign(k)
      o = o + 2
    else
      refused(i, key)
    end
  end
end
return out
