"""normbench's Hydra plugins: submitit launchers that resume requeued jobs (`launcher`)."""
