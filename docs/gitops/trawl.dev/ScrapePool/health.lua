-- Argo CD health check for trawl.dev/ScrapePool.
-- Install: resource.customizations.health.trawl.dev_ScrapePool in argocd-cm (see docs/gitops/README.md).
--
-- Ready=True with no scaling under way is Healthy, scaled to zero included (an idle pool is a
-- healthy pool). Stalled (invalid spec, Redis unreachable) and Degraded (the failure guard holds
-- scaling because the sites fail) are Degraded; a rollout or scaling step is Progressing.
local hs = {}

local function condition(status, type)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local function is_true(status, type)
  local c = condition(status, type)
  return c ~= nil and c.status == "True"
end

local function message_of(status, type, fallback)
  local c = condition(status, type)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to reconcile the pool"
  return hs
end

local generation = obj.metadata.generation
local observed = status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

if is_true(status, "Stalled") then
  hs.status = "Degraded"
  hs.message = message_of(status, "Stalled", "The operator cannot make progress")
  return hs
end
if is_true(status, "Degraded") then
  hs.status = "Degraded"
  hs.message = message_of(status, "Degraded", "The pool is degraded")
  return hs
end
if is_true(status, "Reconciling") then
  hs.status = "Progressing"
  hs.message = message_of(status, "Reconciling", "Scaling workers")
  return hs
end
if is_true(status, "Ready") then
  hs.status = "Healthy"
  local ready = status.readyReplicas or 0
  local desired = status.desiredReplicas or 0
  hs.message = message_of(status, "Ready", tostring(ready) .. "/" .. tostring(desired) .. " workers ready")
  return hs
end

hs.status = "Progressing"
hs.message = message_of(status, "Ready", "Waiting for workers")
return hs
