-- dedupe_lib: the sinks' record of the (job, URL) keys they wrote, put in front of the scripts that use it
-- (trawl.sinks.digests). The record is a hash: field = the first 2 bytes of a record's 16-byte digest (its
-- bucket, 65,536 at most), value = the other 14 bytes of every digest in that bucket, concatenated; field
-- "n" = how many digests the hash holds. A set of hex keys written by older workers (the legacy set) is
-- read beside it, never written, so an upgrade in the middle of a job neither loses nor rewrites a record.
-- A batch's digests come packed in one argument (16 bytes each): a Redis argument costs more than the
-- lookup of a digest.
local DD_DIGEST, DD_TAIL = 16, 14

-- Whether the concatenated tails hold this tail at a multiple of 14 (a match across two tails is not one).
local function dd_holds(blob, tail)
  local from = 1
  while true do
    local at = string.find(blob, tail, from, true)
    if not at then return false end
    if (at - 1) % DD_TAIL == 0 then return true end
    from = at + 1
  end
end

-- The i-th digest of a packed batch (1-based), and how many there are.
local function dd_digest(packed, i)
  return string.sub(packed, (i - 1) * DD_DIGEST + 1, i * DD_DIGEST)
end

local function dd_size(packed)
  return math.floor(#packed / DD_DIGEST)
end

local function dd_hex(digest)
  return (string.gsub(digest, '.', function(c) return string.format('%02x', string.byte(c)) end))
end

-- A batch's view of the hash: the buckets of its digests, read in one HMGET per 1000 buckets, those it
-- changed, and how many digests it added.
local function dd_open(hash, legacy, packed)
  local dd = {hash = hash, legacy = legacy, has_legacy = redis.call('EXISTS', legacy) == 1,
              blobs = {}, dirty = {}, added = 0}
  local fields, wanted = {}, {}
  for i = 1, dd_size(packed) do
    local field = string.sub(packed, (i - 1) * DD_DIGEST + 1, (i - 1) * DD_DIGEST + 2)
    if not wanted[field] then
      wanted[field] = true
      fields[#fields + 1] = field
    end
  end
  for from = 1, #fields, 1000 do
    local chunk = {unpack(fields, from, math.min(from + 999, #fields))}  -- unpack's stack is bounded
    local blobs = redis.call('HMGET', hash, unpack(chunk))
    for k, field in ipairs(chunk) do
      dd.blobs[field] = blobs[k] or ''
    end
  end
  return dd
end

-- Whether the record with this digest was written (the legacy set holds its hex).
local function dd_seen(dd, digest)
  if dd_holds(dd.blobs[string.sub(digest, 1, 2)], string.sub(digest, 3)) then return true end
  return dd.has_legacy and redis.call('SISMEMBER', dd.legacy, dd_hex(digest)) == 1
end

-- Record the digest unless it was written; true if it is new.
local function dd_add(dd, digest)
  if dd_seen(dd, digest) then return false end
  local field = string.sub(digest, 1, 2)
  dd.blobs[field] = dd.blobs[field] .. string.sub(digest, 3)
  dd.dirty[field] = true
  dd.added = dd.added + 1
  return true
end

-- Write the changed buckets and the count; the number of digests added.
local function dd_flush(dd)
  if dd.added == 0 then return 0 end
  local args = {}
  for field in pairs(dd.dirty) do
    args[#args + 1] = field
    args[#args + 1] = dd.blobs[field]
    if #args >= 1000 then
      redis.call('HSET', dd.hash, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('HSET', dd.hash, unpack(args)) end
  redis.call('HINCRBY', dd.hash, 'n', dd.added)
  return dd.added
end
