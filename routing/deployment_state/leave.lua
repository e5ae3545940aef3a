-- ARGV[7]: slot
local slot = ARGV[7]
local w = remove_waiter(slot)
if not w and redis.call('ZSCORE', K_SLOTS, slot) then return {1, 0, 0, '0'} end
local class = w and w[1] or 'batch'
local hold = redis.call('HGET', K_STATE, 'hold') or tostring(DEFAULT_HOLD)
return {0, ahead_of(class), allowed_slots(), hold}
