"""Field names seen in the recorded outputs of every supported Slurm version (tests/data/slurm/).

A field outside these sets is reported once as "unknown field" (never an error). Regenerate with
``python -m tests.slurm_fixtures known-fields`` after recording a new version.
"""
KNOWN_JOB_FIELDS = frozenset({
    "account", "accrue_time", "admin_comment", "allocating_node", "array_job_id", "array_max_tasks",
    "array_task_id", "array_task_string", "association_id", "batch_features", "batch_flag",
    "batch_host", "billable_tres", "burst_buffer", "burst_buffer_state", "cluster",
    "cluster_features", "command", "comment", "container", "container_id", "container_type",
    "contiguous", "core_spec", "cores_per_socket", "cpu_frequency_governor",
    "cpu_frequency_maximum", "cpu_frequency_minimum", "cpus", "cpus_per_task", "cpus_per_tres",
    "cron", "current_working_directory", "deadline", "delay_boot", "dependency",
    "derived_exit_code", "eligible_time", "end_time", "excluded_nodes", "exit_code", "extra",
    "failed_node", "features", "federation_origin", "federation_siblings_active",
    "federation_siblings_viable", "flags", "gres_detail", "group_id", "group_name", "het_job_id",
    "het_job_id_set", "het_job_offset", "hold", "job_id", "job_resources", "job_size_str",
    "job_state", "last_sched_evaluation", "licenses", "licenses_allocated", "mail_type",
    "mail_user", "max_cpus", "max_nodes", "maximum_switch_wait_time", "mcs_label", "memory_per_cpu",
    "memory_per_node", "memory_per_tres", "memory_update_delay", "memory_update_margin",
    "minimum_cpus_per_node", "minimum_tmp_disk_per_node", "name", "network", "nice", "node_count",
    "nodes", "partition", "power", "pre_sus_time", "preempt_time", "preemptable_time", "prefer",
    "priority", "priority_by_partition", "profile", "qos", "reboot", "requeue", "required_nodes",
    "required_switches", "resize_time", "restart_cnt", "resv_name", "scheduled_nodes",
    "segment_size", "selinux_context", "shared", "show_flags", "sockets_per_board",
    "sockets_per_node", "standard_error", "standard_input", "standard_output", "start_time",
    "state_description", "state_reason", "stderr_expanded", "stdin_expanded", "stdout_expanded",
    "step_id", "submit_line", "submit_time", "suspend_time", "system_comment", "tasks",
    "tasks_per_board", "tasks_per_core", "tasks_per_node", "tasks_per_socket", "tasks_per_tres",
    "thread_spec", "threads_per_core", "time_limit", "time_minimum", "tres_alloc_str", "tres_bind",
    "tres_freq", "tres_per_job", "tres_per_node", "tres_per_socket", "tres_per_task",
    "tres_req_str", "user_id", "user_name", "wckey",
})
KNOWN_NODE_FIELDS = frozenset({
    "active_features", "address", "alloc_cpus", "alloc_idle_cpus", "alloc_memory", "architecture",
    "boards", "boot_time", "burstbuffer_network_address", "cert_flags", "cluster_name", "comment",
    "cores", "cpu_binding", "cpu_load", "cpus", "effective_cpus", "energy", "external_sensors",
    "extra", "features", "free_mem", "free_memory", "gpu_spec", "gres", "gres_drained", "gres_used",
    "hostname", "idle_cpus", "instance_id", "instance_type", "last_busy", "mcs_label", "name",
    "next_state_after_reboot", "next_state_after_reboot_flags", "operating_system", "owner",
    "partitions", "port", "power", "real_memory", "reason", "reason_changed_at",
    "reason_set_by_user", "res_cores_per_gpu", "reservation", "resume_after", "slurmd_start_time",
    "slurmd_version", "sockets", "specialized_cores", "specialized_cpus", "specialized_memory",
    "state", "state_flags", "suspend_time", "temporary_disk", "threads", "tls_cert_last_renewal",
    "topology", "tres", "tres_used", "tres_weighted", "version", "weight",
})
