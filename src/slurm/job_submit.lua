--[[ gpufrac's job-submit rule for Slurm's job_submit/lua plugin (JobSubmitPlugins=lua; Slurm
reads job_submit.lua next to slurm.conf).

A job asking gpufrac for part of a GPU (--gpu-memory SIZE or --gpu-fraction F, the options of
libgpufrac_spank.so) gets the number of `shard` GRES that part needs on this cluster's GPUs, so
that Slurm's scheduler never places more memory on a GPU than it has. What every step of the job
would be refused is refused at submission with the reason: more memory than any GPU here has
for programs, less than a CUDA context takes, a --gpu-compute above the share of the GPU the
memory books (the shards book memory; nothing books time). Jobs that ask for whole GPUs
(--gres=gpu:N, --gpus...) are left as they are; so are jobs without gpufrac's options, whose
shards the SPANK plugin holds them to on the node, except one asking more shards than one GPU has.

On a cluster that shares GPUs through Slurm's `mps` GRES instead, set GPUFRAC_GRES to "mps" and
give each model its MPS count per GPU (100 as Slurm's documentation has it) as `shards`: the rule
then books the request's share of those units, or the user's own --gres=mps:N where that is more
(N is also the share of the GPU's SMs Slurm gives the job, which the user may want larger).

Edit GPUFRAC_GPUS to describe the cluster, one entry per GPU model (docs/slurm.md):
  memory        what one GPU of the model has for programs: the total NVML reports, not the
                marketing size (`nvidia-smi --query-gpu=name,memory.total --format=csv` on a node:
                "NVIDIA H100 80GB HBM3, 81559 MiB" is memory = "81559Mi")
  context       what the limiter charges for each CUDA context on it, the context and its loaded
                kernels (gpufrac's GPU catalogue, src/gpu/catalogue.h's ContextChargeBytes: 783 MiB
                on Hopper, 656 MiB on Ampere); a request that cannot hold that is refused
  shard_memory  the memory one shard stands for, the same as plugstack.conf's shard_memory= on
                the model's nodes (1G: an H100-80GB's 80 shards book 80 GiB of its 79.6)
  shards        the shard count per GPU that gres.conf declares (under mps: its MPS units, 100)
Shards are a count, the same unit on every node, so give every model the same shard_memory where
you can; where models differ, a job gets the largest count any model that can hold it needs,
which is safe on every model and wastes some on the larger ones. --]]

GPUFRAC_GRES = "shard"

GPUFRAC_GPUS = {
  { name = "A100-40GB", memory = "40960Mi", context = "656Mi", shard_memory = "5G", shards = 8 },
  -- { name = "H100-80GB", memory = "81559Mi", context = "783Mi", shard_memory = "1G", shards = 80 },
  -- { name = "H200-141GB", memory = "143771Mi", context = "783Mi", shard_memory = "1G", shards = 140 },
}

local GiB = 1024 * 1024 * 1024
local OPTION_PREFIX = "_SLURM_SPANK_OPTION_gpufrac_"

-- Sizes as gpufrac writes them: binary units, "10G", "10GiB", "1536Mi", "512M", "1.5T".
-- `text` for a log line: anything but printable ASCII (a user's option text may hold newlines
-- or terminal escapes) as "?".
local function printable(text)
  return (string.gsub(text, "[^\32-\126]", "?"))
end

local function parse_size(text)
  if text == nil then return nil end
  local number, unit = string.match(text, "^%s*([%d%.]+)%s*(%a*)%s*$")
  number = tonumber(number)
  if number == nil or number <= 0 then return nil end
  local scale = { [""] = 1, B = 1, K = 1024, M = 1024 ^ 2, G = 1024 ^ 3, T = 1024 ^ 4 }
  unit = string.upper(unit)
  unit = string.gsub(unit, "IB$", "")
  unit = string.gsub(unit, "I$", "")
  if unit ~= "B" then unit = string.gsub(unit, "B$", "") end
  if scale[unit] == nil then return nil end
  return math.floor(number * scale[unit])
end

-- Shares: "0.25" or "25%", strictly between 0 and 1.
local function parse_fraction(text)
  if text == nil then return nil end
  local number, percent = string.match(text, "^%s*([%d%.]+)%s*(%%?)%s*$")
  number = tonumber(number)
  if number == nil then return nil end
  if percent == "%" then number = number / 100 end
  if number <= 0 or number >= 1 then return nil end
  return number
end

local function format_gib(bytes)
  return string.format("%.1f GiB", bytes / GiB)
end

-- gpufrac's options as srun, sbatch and salloc hand them over to slurmctld.
local function gpufrac_options(job_desc)
  local options = {}
  local env = job_desc.spank_job_env
  if env == nil then return options end
  for _, entry in pairs(env) do
    local name, value = string.match(entry, "^" .. OPTION_PREFIX .. "([%w_]+)=(.*)$")
    if name ~= nil then options[name] = value end
  end
  return options
end

-- Whether the job asks for whole GPUs in any of Slurm's ways.
local function asks_whole_gpus(job_desc)
  for _, field in ipairs({ "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }) do
    local value = job_desc[field]
    if value ~= nil and string.find(value, "gpu", 1, true) ~= nil then return true end
  end
  return false
end

local function format_milli(milli)
  local text = string.format("%.3f", milli / 1000)
  return (string.gsub(string.gsub(text, "0+$", ""), "%.$", ""))
end

-- The units (shards, or MPS units) a request needs: nil and the reason when no GPU model here
-- can hold it, as every step on such a GPU would be refused.
function gpufrac_shards_needed(memory_text, fraction_text, compute_text)
  local memory, fraction_milli, compute_milli
  if memory_text ~= nil and fraction_text ~= nil then
    return nil, "give one of --gpu-memory and --gpu-fraction, not both"
  elseif memory_text ~= nil then
    memory = parse_size(memory_text)
    if memory == nil then return nil, "--gpu-memory " .. memory_text .. " is not a size" end
  elseif fraction_text ~= nil then
    local fraction = parse_fraction(fraction_text)
    if fraction == nil then
      return nil, "--gpu-fraction " .. fraction_text .. " is not a share between 0 and 1"
    end
    fraction_milli = math.floor(fraction * 1000 + 0.5)
  else
    return nil, "--gpu-compute needs --gpu-memory or --gpu-fraction"
  end
  if compute_text ~= nil then
    local compute = parse_fraction(compute_text)
    if compute == nil then
      return nil, "--gpu-compute " .. compute_text .. " is not a share between 0 and 1"
    end
    compute_milli = math.floor(compute * 1000 + 0.5)
  end
  local asked = memory_text and ("--gpu-memory " .. memory_text) or
    ("--gpu-fraction " .. fraction_text)
  local needed, largest, largest_name, context_name, context = nil, 0, nil, nil, nil
  local least_share, least_share_name
  for _, model in ipairs(GPUFRAC_GPUS) do
    local total = parse_size(model.memory)
    local model_context = parse_size(model.context) or 0
    local shard = parse_size(model.shard_memory)
    if total ~= nil and total > largest then largest, largest_name = total, model.name end
    local limit = memory
    if limit == nil and total ~= nil then limit = math.floor(total * fraction_milli / 1000) end
    local count
    if total ~= nil and limit <= total and limit > model_context then
      if GPUFRAC_GRES == "shard" and shard ~= nil then
        count = math.ceil(limit / shard)
      else
        count = math.ceil(limit * model.shards / total)
      end
      if count < 1 then count = 1 end
      if count > model.shards then count = nil end
    elseif total ~= nil and limit <= model_context then
      context_name, context = model.name, model_context
    end
    if count ~= nil then
      if needed == nil or count > needed then needed = count end
      -- The share of the GPU's time the memory books there, as the plugin computes it.
      local share = fraction_milli or math.ceil(limit * 1000 / total)
      if least_share == nil or share < least_share then
        least_share, least_share_name = share, model.name
      end
    end
  end
  if needed == nil then
    if memory ~= nil and memory > largest then
      return nil, asked .. " is more than any GPU here has: the largest GPU here (" ..
        tostring(largest_name) .. ") has " .. format_gib(largest)
    elseif context ~= nil then
      return nil, asked .. " cannot hold even a CUDA context (about " ..
        string.format("%d MiB", math.floor(context / 1024 ^ 2)) .. " on an " .. context_name ..
        "): ask for more"
    end
    return nil, asked .. " needs more shards than a GPU here has"
  end
  if compute_milli ~= nil and compute_milli > least_share then
    return nil, "--gpu-compute " .. format_milli(compute_milli) ..
      " is more than the share of the GPU that " .. asked .. " books on an " ..
      least_share_name .. ", " .. format_milli(least_share) .. ": ask for at most " ..
      format_milli(least_share) .. ", or for more memory"
  end
  return needed
end

-- The shards a job without gpufrac's options asks for per node (--gres=shard:N); nil for none.
local function plain_shards(job_desc)
  local value = job_desc.tres_per_node
  if value == nil then return nil end
  for item in string.gmatch(value, "[^,]+") do
    if string.match(item, "^gres[:/]shard[:/]") then
      return tonumber(string.match(item, ":(%d+)$"))
    end
  end
  return nil
end

-- tres_per_node with `count` of GPUFRAC_GRES in place of the user's own request of it; for mps,
-- the user's count where it is larger.
local function with_units(tres_per_node, count)
  local kept = {}
  if tres_per_node ~= nil then
    for item in string.gmatch(tres_per_node, "[^,]+") do
      if string.match(item, "^gres[:/]([^:]+)") ~= GPUFRAC_GRES then
        table.insert(kept, item)
      elseif GPUFRAC_GRES == "mps" then
        local asked = tonumber(string.match(item, ":(%d+)$"))
        if asked ~= nil and asked > count then count = asked end
      end
    end
  end
  table.insert(kept, "gres:" .. GPUFRAC_GRES .. ":" .. count)
  return table.concat(kept, ",")
end

local function refuse(submit_uid, reason)
  reason = printable(reason)
  slurm.log_user("gpufrac: %s", reason)
  slurm.log_info("gpufrac: refused a job of uid %u: %s", submit_uid, reason)
  return slurm.ERROR
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local options = gpufrac_options(job_desc)
  if asks_whole_gpus(job_desc) then return slurm.SUCCESS end
  if next(options) == nil then
    -- Plain shards: the plugin holds each step to its shards, of one GPU; more shards than any
    -- GPU has could only be spread over several, and every step would be refused.
    local shards, most = plain_shards(job_desc), 0
    for _, model in ipairs(GPUFRAC_GPUS) do
      if model.shards > most then most = model.shards end
    end
    if GPUFRAC_GRES == "shard" and shards ~= nil and shards > most then
      return refuse(submit_uid, "--gres=shard:" .. shards .. " is more than the " .. most ..
        " shards of a GPU here; gpufrac holds a job to shards of one GPU")
    end
    return slurm.SUCCESS
  end
  local count, reason = gpufrac_shards_needed(options["gpu_memory"], options["gpu_fraction"],
    options["gpu_compute"])
  if count == nil then return refuse(submit_uid, reason) end
  job_desc.tres_per_node = with_units(job_desc.tres_per_node, count)
  return slurm.SUCCESS
end

-- A gpufrac job's shards follow its request: its user may not change them afterwards (with
-- `scontrol update ... TresPerNode=`, while it is pending). Only root may.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 or job_desc.tres_per_node == nil then return slurm.SUCCESS end
  if next(gpufrac_options(job_rec)) == nil then return slurm.SUCCESS end
  local reason = "job " .. tostring(job_rec.job_id) .. "'s shards follow its --gpu-memory or " ..
    "--gpu-fraction; submit it again to change them"
  slurm.log_user("gpufrac: %s", reason)
  slurm.log_info("gpufrac: refused an update by uid %u: %s", modify_uid, reason)
  -- Slurm 22.05 passes no log_user text of slurm_job_modify on to scontrol (SchedMD bug 14539,
  -- fixed in 23.02), which prints only the error code's text: "Access/permission denied", not
  -- ERROR's "Unspecified error". 22.05 does not name the code in Lua: its value, 2002.
  return slurm.ESLURM_ACCESS_DENIED or 2002
end

return slurm.SUCCESS
