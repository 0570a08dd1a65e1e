"""The leaderboard's row labels and what each norm normalizes over.

A row is a norm as it ran: ``ln`` when both stacks of a Transformer (or the whole image model) use
it, ``pn (enc) / ln (dec)`` when a norm runs in the encoder only, with an LN decoder (the norms
whose statistics mix time steps, which a decoder must not use). "Normalizes over" comes from the
norm classes' own declarations (`normbench.norms.base.Norm.normalizes_over`), per layout.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from normbench.analysis.loading.runs import Run
from normbench.analysis.wording.figure_names import DATASET_NAMES

IMAGES, TRANSLATION = "images", "translation"
ENCODER_ONLY_DECODER = "ln"
"""The decoder's norm when the compared norm mixes time steps and runs in the encoder only."""


DATA_FOLDERS = {
    "de-en-subset": "Multi30k de-en (subset)",  # read by the iwslt14 loader; shared/data/de-en-subset/README.md
    "cifar10-subset": "CIFAR-10 (subset)",
}
"""Data folders whose contents the data set's config name does not say: what they hold."""


def model_label(name: str, depth: Any = None) -> str:
    """The model as it ran: ``resnet20`` built at depth 8 is ``ResNet8`` (He et al.'s CIFAR family
    at n = 1), never the config's name for another depth; another model at another depth than its
    name says: ``vgg16 (depth 11)``."""
    if not depth or name.rstrip("0123456789") + str(depth) == name:
        return name
    if re.fullmatch(r"resnet\d+", name):
        return f"ResNet{depth}"
    return f"{name} (depth {depth})"


def dataset_label(name: str, folder: str = "") -> str:
    """The data as they ran: a known folder by what it holds (``de-en-subset``: Multi30k, read by the
    ``iwslt14`` loader), another folder beside the name (``cifar10 (my-copy)``), else the name."""
    if not folder or folder == name:
        return name
    return DATA_FOLDERS.get(folder, f"{name} ({folder})")


MODEL_CELL = re.compile(r"^(?P<name>[a-z]+?)(?P<depth>\d*) \(depth (?P<ran>\d+)\)$|^(?P<plain>.+)$")
DATASET_CELL = re.compile(r"^(?P<name>.+?)(?: \((?P<folder>[^()]+)\))?$")
MODEL_FAMILIES = {"resnet": "ResNet", "vgg": "VGG"}


def model_title(model: str) -> str:
    """A cell's model as it ran: ``resnet20 (depth 8)`` → ``ResNet8``, ``vgg11`` → ``VGG11``; other
    names as they are."""
    m = MODEL_CELL.match(model)
    name, depth = (m["name"], m["ran"]) if m and m["ran"] else (model, "")
    family = re.match(r"^([a-z]+)(\d*)$", name)
    if family and family[1] in MODEL_FAMILIES:
        return MODEL_FAMILIES[family[1]] + (depth or family[2])
    return model


def dataset_title(dataset: str) -> str:
    """A cell's data set as it is: its shared folder's contents when known (``iwslt14 (de-en-subset)``
    → ``Multi30k de-en (subset)``), else the data set's name in words (`figure_names.DATASET_NAMES`:
    ``synthetic_images`` → ``synthetic images``)."""
    m = DATASET_CELL.match(dataset)
    if m and m["folder"] in DATA_FOLDERS:
        return DATA_FOLDERS[m["folder"]]
    name = m["name"] if m else dataset
    return DATASET_NAMES.get(name, name) + (f" ({m['folder']})" if m and m["folder"] else "")


def cell_title(model: str, dataset: str) -> str:
    """``ResNet8 on CIFAR-10 (subset)``: a leaderboard cell as it ran
    (`normbench.analysis.leaderboard.leaderboard.cell_of`'s
    strings read back)."""
    return f"{model_title(model)} on {dataset_title(dataset)}"


def stack_norms(run: Run) -> tuple[str, str]:
    """(encoder's norm, decoder's norm): ``model.encoder_norm`` / ``model.decoder_norm``, each
    defaulting to the run's ``norm`` (both are the run's norm on images)."""
    return str(run.stack_norm("encoder").name), str(run.stack_norm("decoder").name)


def label(encoder: str, decoder: str) -> str:
    """A row's norm: the name when both stacks share it, else ``pn (enc) / ln (dec)``."""
    return encoder if encoder == decoder else f"{encoder} (enc) / {decoder} (dec)"


def norm_of(run: Run) -> str:
    """The run's row label: ``ln``, or ``pn (enc) / ln (dec)`` for PN in the encoder, LN in the decoder."""
    return label(*stack_norms(run))


def swept_norm(run: Run) -> str:
    """The norm the run compares: the encoder's (the run's ``norm`` on images)."""
    return stack_norms(run)[0]


def registered_norms() -> list[str]:
    """Every norm this checkout registers (each gets a row in every cell, ``not run`` or not)."""
    from normbench.norms import list_norms

    return list_norms()


@functools.cache
def normalizes_over(norm: str, layout: str) -> str:
    """What registered norm ``norm`` normalizes over in ``layout`` (its class's declaration,
    `normbench.norms.base.Norm.normalizes_over`); "" for a norm this checkout does not know."""
    from normbench.norms.registry import NORMS

    try:
        return str(NORMS.get(norm).normalizes_over(layout))
    except (KeyError, ValueError, AttributeError, NotImplementedError):
        return ""


def over_of(task: str, encoder: str, decoder: str) -> str:
    """A row's "normalizes over": per layout of the task; both stacks' when they differ."""
    if task == IMAGES:
        return normalizes_over(encoder, "NCHW")
    if encoder == decoder:
        return normalizes_over(encoder, "NTC")
    return f"enc: {normalizes_over(encoder, 'NTC')}; dec: {normalizes_over(decoder, 'NTC')}"
