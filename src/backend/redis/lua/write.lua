-- Conditional writes of rate-limit keys of one bucket (one hash slot), in one step.
-- KEYS[1]: the bucket's copy of the quotas (a hash: limit -> "VERSION:QUOTA");
-- KEYS[1 + i]: the key of write i ("VERSION:STATE").
-- ARGV[1]: "joint" (all or none) or "each" (each on its own); then five per write: limit,
-- quota version, expected key version ("" = must be absent), new state, and when Redis may
-- drop the key (unix ms: its expiry plus the grace).
-- A new key's version is the server's time in microseconds, so a key deleted and written
-- again never repeats a version an old client may still hold.
-- Returns, per write: the new version (written); or 0, the quota copy and the key as found
-- (not written; false where absent); or, "each" only, -1 and why the key is unusable (a
-- foreign value or type), so one bad key fails alone rather than its batch-mates.
-- Redis time goes mostly to redis.call, so a limit's copy is read once per call and a key
-- expected absent is one SET NX.
local call = redis.call
local joint = ARGV[1] == 'joint'
local n = #KEYS - 1
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

-- Every limit's copy and its version, read before any write (a foreign copy fails the call).
local copy, copy_version = {}, {}
for i = 1, n do
  local limit = ARGV[2 + (i - 1) * 5]
  if copy[limit] == nil then
    local c = call('HGET', KEYS[1], limit)
    copy[limit] = c
    if c then
      copy_version[limit] = version(c) or error({err = foreign('the quota copy of ' .. limit)})
    end
  end
end

local out, o = {}, 0
local function refused(limit, key)
  out[o + 1], out[o + 2], out[o + 3] = 0, copy[limit], key
  o = o + 3
end

if joint then
  local found, all = {}, true
  for i = 1, n do
    local a = 2 + (i - 1) * 5
    local key = call('GET', KEYS[1 + i])
    local v = key and (version(key) or error({err = foreign(KEYS[1 + i])}))
    found[i] = key
    local want = ARGV[a + 2]
    all = all and copy_version[ARGV[a]] == tonumber(ARGV[a + 1])
      and (want == '' and not v or v == tonumber(want))
  end
  for i = 1, n do
    local a = 2 + (i - 1) * 5
    if all then
      local v = found[i] and version(found[i]) + 1 or now
      call('SET', KEYS[1 + i], string.format('%.0f', v) .. ':' .. ARGV[a + 3], 'PXAT', ARGV[a + 4])
      o = o + 1
      out[o] = v
    else
      refused(ARGV[a], found[i])
    end
  end
  return out
end

for i = 1, n do
  local a = 2 + (i - 1) * 5
  local limit, k, want = ARGV[a], KEYS[1 + i], ARGV[a + 2]
  local done = false
  if copy_version[limit] == tonumber(ARGV[a + 1]) then
    if want == '' then
      done = call('SET', k, now_s .. ':' .. ARGV[a + 3], 'NX', 'PXAT', ARGV[a + 4]) and now
    else
      local key = redis.pcall('GET', k)
      local v = type(key) == 'string' and version(key)
      if v and v == tonumber(want) then
        v = v + 1
        call('SET', k, string.format('%.0f', v) .. ':' .. ARGV[a + 3], 'PXAT', ARGV[a + 4])
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
      refused(limit, key)
    end
  end
end
return out
