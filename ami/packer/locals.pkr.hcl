locals {
  build_stamp = regex_replace(timestamp(), "[- TZ:]", "")
  # Where lib/common.sh of the scripts lands: /var/tmp survives the reboot barrier, /tmp does not.
  script_lib_dir = "/var/tmp/gpufleet-lib"

  # Setting name in GPUFLEET_<KEY>_<SETTING> -> its map, keyed by component (variables.pkr.hcl).
  component_settings = {
    VERSION             = var.component_versions
    URL                 = var.component_urls
    SHA256              = var.component_sha256
    GPG_KEY_URL         = var.component_gpg_key_urls
    GPG_KEY_FINGERPRINT = var.component_gpg_key_fingerprints
  }

  # Every provisioning script gets all of these (docs/reference/ami-scripts.md: which of them each script reads).
  script_environment = concat(
    [
      "GPUFLEET_AMI_PROFILE=${var.profile}",
      "GPUFLEET_OS_FAMILY=${var.os_family}",
      "GPUFLEET_OS_VERSION=${var.os_version}",
      "GPUFLEET_NVSWITCH=${var.nvswitch ? "1" : "0"}",
      "GPUFLEET_CUDA_ARCHITECTURES=${var.cuda_architectures}",
      "GPUFLEET_LIB_DIR=${local.script_lib_dir}",
    ],
    flatten([
      for key in keys(var.component_versions) : [
        for setting, values in local.component_settings : "GPUFLEET_${upper(key)}_${setting}=${values[key]}"
      ]
    ]),
    [for name, value in var.package_environment : "${name}=${value}"],
    [for name, value in var.python_environment : "${name}=${value}"],
  )

  # On the image, its snapshots and the build instance: images are found by the key gpufleet:profile.
  image_tags = merge(
    {
      "Name"              = "gpufleet-${var.profile}"
      "gpufleet:profile"  = var.profile
      "gpufleet:build-id" = var.build_id
    },
    { for key, version in var.component_versions : "gpufleet:version:${key}" => version },
  )
}
