-- Opens the fair semaphore, creating it with capacity ARGV[2] and classes ARGV[3] if absent
-- and both are given: its record (marked fair, so a lost fair record is never read as plain)
-- and its fair record, in one step. Returns {'nosem'} (absent, not created) or
-- {'ok', CAPACITY, FAIR} (see fair_item: '' when the semaphore is a plain one).
local stored = redis.call('HGET', KEYS[1], 'capacity')
if stored then
  return {'ok', stored, fair_item()}
end
if ARGV[2] == '' or ARGV[3] == '' then
  return {'nosem'}
end
redis.call('HSET', KEYS[1], 'capacity', ARGV[2], 'floor', 0, 'last', 0, 'ver', 1, 'fair', 1)
redis.call('DEL', KEYS[5])
redis.call('HSET', KEYS[5], 'ver', 1, 'classes', ARGV[3], 'granted', '')
return {'ok', ARGV[2], fair_item()}
