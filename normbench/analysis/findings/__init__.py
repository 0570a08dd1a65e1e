"""The findings page's tables (`findings`, `findings_board`) and the committed claims re-judged from
their per-run values (`verify`), for `normbench-reports index`."""
