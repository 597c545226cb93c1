# The build's inputs. Those without a default come from the profile: `gpufleet ami render PROFILE --out DIR`
# writes their values into DIR/gpufleet.auto.pkrvars.json, which Packer loads by itself. Those with a default
# are the operator's (-var name=value).

variable "profile" {
  type        = string
  description = "AMI profile the image is built from (tag gpufleet:profile)."
}

variable "profile_description" {
  type        = string
  description = "The profile's description: the image's description."
}

variable "os_family" {
  type        = string
  description = "OS family of the base image: ubuntu | amzn."
}

variable "os_version" {
  type        = string
  description = "OS version of the base image: 18.04 | 22.04 | 2 | 2023."
}

variable "nvswitch" {
  type        = bool
  description = "The target instance types have NVSwitch: Fabric Manager is installed and enabled."
}

variable "cuda_architectures" {
  type        = string
  description = "Compute capabilities of the target GPUs as NVCC writes them, space-separated (80 for A100, 90 for H100): NCCL is built for these only."
}

variable "build_instance_type" {
  type        = string
  description = "Instance type Packer builds on."
}

variable "source_ami_name" {
  type        = string
  description = "Name pattern of the base image; the newest match is used and recorded in the tag gpufleet:source-ami."
}

variable "source_ami_owner" {
  type        = string
  description = "Account that publishes the base image."
}

variable "ssh_username" {
  type        = string
  description = "Login user of the base image."
}

variable "root_device_name" {
  type        = string
  description = "Root device of the base image."
}

variable "root_volume_gib" {
  type        = number
  description = "Size of the encrypted gp3 root volume in GiB."
}

variable "root_volume_iops" {
  type        = number
  description = "gp3 IOPS of the root volume."
}

variable "root_volume_throughput" {
  type        = number
  description = "gp3 throughput of the root volume in MiB/s."
}

# One map per component setting, keyed by the contract's component keys (gpufleet/ami/__init__.py COMPONENT_KEYS);
# locals.pkr.hcl turns each into the scripts' GPUFLEET_<KEY>_<SETTING> variables.

variable "component_versions" {
  type        = map(string)
  description = "Exact version of every component of the profile."
}

variable "component_urls" {
  type        = map(string)
  description = "Download location of every component (empty: the pinned version from the vendor's signed repository)."
}

variable "component_sha256" {
  type        = map(string)
  description = "SHA-256 of every download (empty where the vendor publishes none)."
}

variable "component_gpg_key_urls" {
  type        = map(string)
  description = "Vendor key that signs the download or its repository (empty where there is none)."
}

variable "component_gpg_key_fingerprints" {
  type        = map(string)
  description = "Fingerprint of the vendor key that must have signed the download (empty where the profile pins none)."
}

variable "instance_profile" {
  type        = string
  description = "Existing instance profile of the build instance, whose role lets the SSM agent work (empty: Packer creates a temporary one)."
  default     = ""
}

variable "region" {
  type        = string
  description = "Region the image is built in."
  default     = "us-east-1"
}

variable "subnet_id" {
  type        = string
  description = "Subnet of the build instance (empty: the default VPC); it needs outbound HTTPS to download and to reach SSM."
  default     = ""
}

variable "kms_key_id" {
  type        = string
  description = "KMS key that encrypts the image's snapshots (empty: the account's default EBS key)."
  default     = ""
}

variable "build_id" {
  type        = string
  description = "Build identifier of the pipeline run (tag gpufleet:build-id)."
  default     = "local"
}

variable "scripts_dir" {
  type        = string
  description = "Directory of the provisioning scripts (scripts/ami): gpufleet ami render sets those installed with gpufleet."
}

variable "reboot_pause" {
  type        = string
  description = "How long the step after the reboot barrier waits before it first connects again."
  default     = "60s"
}

variable "reboot_reconnect_timeout" {
  type        = string
  description = "How long the step after the reboot barrier keeps retrying to connect (SSH through a new Session Manager session)."
  default     = "15m"
}

variable "manifest_path" {
  type        = string
  description = "Where the manifest post-processor writes the build's manifest."
  default     = "manifest.json"
}

variable "package_environment" {
  type        = map(string)
  description = "GPUFLEET_<KEY>_PACKAGE, _PACKAGE_VERSION, _REPOSITORIES and _EXTRAS_TOPIC of every package key of ami/packages.yaml, resolved for the profile."
}

variable "python_environment" {
  type        = map(string)
  description = "GPUFLEET_UV_VERSION, _URL, _SHA256 and GPUFLEET_PYTORCH_VERSION, _INDEX_URL, _PYTHON: the profile's python section (empty PyTorch values: no PyTorch)."
}
