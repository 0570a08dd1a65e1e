"""Runs read into `Run` objects: local run folders and sweeps (`runs`), one run's records
(`run_record`), what the runs were made from (`provenance`), earlier attempts' seeds (`attempts`)."""
