"""The leaderboard: norms ranked per cell (`leaderboard`, `leaderboard_labels`, `leaderboard_setup`), its
figure, its verdicts and its report (`leaderboard_report`: normbench-leaderboard)."""
