-- cordon: replace the set of pods whose workers claim nothing new (the autoscaler's choice at one poll).
-- The set expires unless written again, so an operator that stopped never leaves workers cordoned.
-- KEYS: 1 cordoned pods (set)
-- ARGV: 1 expiry in milliseconds, 2.. pod names
redis.call('DEL', KEYS[1])
if #ARGV > 1 then
  for i = 2, #ARGV, 5000 do
    redis.call('SADD', KEYS[1], unpack(ARGV, i, math.min(i + 4999, #ARGV)))
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return #ARGV - 1
