"""Errors that mean "the user asked for something that cannot work": reported in one line."""


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key, the value and what is allowed."""


class DatasetMissingError(ConfigError):
    """The data set's files are not where the config says, and could not be fetched."""
