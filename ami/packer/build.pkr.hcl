# Runs the provisioning scripts (scripts/ami, gpufleet/ami/__init__.py SCRIPT_NAMES) in that order, as root;
# {{ .Vars }} carries the environment into `sudo -E`.

build {
  sources = ["source.amazon-ebs.gpufleet"]

  # The scripts source lib/common.sh; Packer uploads each script alone, so the library goes up first.
  provisioner "shell" {
    inline = ["mkdir -p ${local.script_lib_dir}"]
  }

  provisioner "file" {
    source      = "${var.scripts_dir}/lib/"
    destination = local.script_lib_dir
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/00-os-update.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/01-build-tools.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/02-nvidia-driver.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  # The reboot barrier: the script reboots the instance, which ends the SSH session and its Session Manager tunnel.
  provisioner "shell" {
    script            = "${var.scripts_dir}/03-reboot.sh"
    execute_command   = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars  = local.script_environment
    expect_disconnect = true
    skip_clean        = true
  }

  # First step after the reboot. The Session Manager tunnel does not survive the reboot: the amazon plugin starts a
  # new session only once the old session-manager-plugin process gives up (about 1.5 minutes) and the instance's SSM
  # agent is back, so the first connection attempts fail. pause_before waits before the first attempt;
  # start_retry_timeout keeps retrying the upload and start of the script (not a failed script: no max_retries)
  # until the tunnel is back.
  # source: packer-plugin-amazon issue #289 and PR #311 (new session after a reboot, in v1.3.3
  # builder/common/ssm/session.go); hashicorp/packer provisioner/shell/provisioner.go StartRetryTimeout ("This can
  # be set high to allow for reboots"), hcl2template/types.build.provisioners.go pause_before.
  provisioner "shell" {
    pause_before        = var.reboot_pause
    start_retry_timeout = var.reboot_reconnect_timeout
    script              = "${var.scripts_dir}/04-fabric-manager.sh"
    execute_command     = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars    = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/05-cuda.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/06-cudnn.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/07-efa-installer.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/08-nccl.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/09-aws-ofi-nccl.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/10-nccl-tests.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/11-fsx-lustre.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/12-onednn.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/13-container-runtime.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/14-aws-cli.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/15-cloudwatch-agent.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/16-cleanup.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    script           = "${var.scripts_dir}/17-validate.sh"
    execute_command  = "{{ .Vars }} sudo -E bash '{{ .Path }}'"
    environment_vars = local.script_environment
  }

  provisioner "shell" {
    inline = ["sudo rm -rf ${local.script_lib_dir}"]
  }

  post-processor "manifest" {
    output     = var.manifest_path
    strip_path = true
    custom_data = merge(
      {
        "profile"  = var.profile
        "build_id" = var.build_id
      },
      { for key, version in var.component_versions : "version:${key}" => version },
    )
  }
}
