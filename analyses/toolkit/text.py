"""The project's own English text, on which the models are run (chapter "Position in the forward pass").

Written for this report (original prose on a neutral expository topic, no quotation from any source), and
kept here as a constant so that it is hashed with the code: an edit to a single character makes every
analysis that reads it stale. No analysis reads a text file.

The text runs to well over 512 tokens in GPT-2's byte-level BPE and in MiniLM's WordPiece tokenizer. The
prompts are cut from its beginning at word boundaries, so that both models read the same words; the
token counts then differ a little between the tokenizers (they are cached with the exact ids).
"""

from __future__ import annotations

import re

TITLE = "The rhythm of the tides"

PARAGRAPHS = (
    "Anyone who spends a day at the seashore notices that the water does not stay in one place. In the "
    "morning the waves may break far out across a wide stretch of wet sand, and by the afternoon the same "
    "beach can be narrow, with the sea lapping at the foot of the dunes. This slow rise and fall is the "
    "tide, and it has shaped coastal life for as long as people have lived beside the ocean. Fishermen plan "
    "their trips around it, harbour masters schedule the arrival of large ships by it, and the creatures of "
    "the rocky shore have adapted their whole existence to being covered and uncovered twice a day.",

    "The main cause of the tide is the gravitational pull of the Moon. Gravity weakens with distance, so the "
    "side of the Earth facing the Moon is pulled slightly more strongly than the centre of the planet, and "
    "the centre is pulled more strongly than the far side. The result is not a single bulge of water under "
    "the Moon but two: one on the near side, where the ocean is drawn toward the Moon, and one on the far "
    "side, where the solid Earth is drawn away from the water. As the Earth turns on its axis, a given "
    "stretch of coast passes through both bulges, which is why most places see two high tides and two low "
    "tides in a little more than a day.",

    "That extra time matters. The Moon travels along its orbit in the same direction that the Earth spins, "
    "so after one full turn of the planet the Moon has moved ahead, and the coast needs roughly fifty more "
    "minutes to catch up with it. High water therefore arrives later each day, drifting through the clock "
    "over the course of a month. A visitor who finds the harbour full at breakfast on Monday may find it "
    "nearly empty at the same hour the following weekend.",

    "The Sun also raises tides, although its effect is a little less than half that of the Moon. The Sun is "
    "enormously more massive, but it is also much farther away, and the tidal force depends on how quickly "
    "gravity changes across the width of the Earth rather than on its overall strength. When the Sun, the "
    "Moon and the Earth line up, at new moon and at full moon, the two effects add together and produce "
    "spring tides, with unusually high high waters and unusually low low waters. The name has nothing to do "
    "with the season; it refers to the water springing up. About a week later, when the Moon stands at a "
    "right angle to the line joining the Earth and the Sun, the two pulls partly cancel and the range "
    "shrinks. These gentler tides are called neap tides.",

    "If the oceans covered the whole planet to a uniform depth, the story might end there. Real seas are "
    "broken up by continents, ridges and shallow shelves, and the water cannot simply follow the Moon around "
    "the globe. Instead, the tide behaves like a wave that sloshes within each ocean basin, bending around "
    "coastlines and reflecting from them. In many basins the wave circles a central point where the height "
    "hardly changes at all. Oceanographers call such a point an amphidromic point, and the lines radiating "
    "from it mark places that reach high water at the same moment. Far from the centre, the range grows "
    "larger.",

    "Local geography can amplify the tide dramatically. A long bay that narrows toward its head funnels the "
    "incoming water into a smaller and smaller space, so the level must rise higher to carry the same "
    "volume. If the natural period of sloshing in the bay happens to be close to the period of the tide, "
    "the two reinforce each other in a kind of resonance. The most famous example lies on the Atlantic "
    "coast of Canada, where the difference between high and low water can exceed the height of a three "
    "storey building. In other places, such as parts of the Mediterranean, the range is so small that many "
    "visitors never notice it.",

    "For centuries, predicting the tide was a practical problem of great importance. Ships that entered a "
    "harbour at the wrong time could run aground on a sandbar that was safely covered only a few hours "
    "earlier. Early tables were based on careful observation: a harbour keeper would record the times and "
    "heights of high water for many months and look for repeating patterns. These records showed that the "
    "tide at any one place could be described as the sum of a number of regular oscillations, each tied to "
    "some motion of the Moon or the Sun, with its own period, height and delay.",

    "In the nineteenth century this idea became a method. Scientists analysed long records of water levels "
    "and separated them into dozens of these components, which they called tidal constituents. Once the "
    "size and timing of each constituent had been measured for a port, the future tide could be computed by "
    "adding the constituents back together for any chosen date. Doing this by hand was tedious, so "
    "engineers built remarkable machines to do it. A tide predicting machine used a set of pulleys and "
    "gears, one for each constituent, turning at the proper rates. A single wire ran over all the pulleys, "
    "and its end moved a pen that traced the predicted water level on a roll of paper. A year of tides for "
    "a busy port could be drawn in an afternoon.",

    "Such machines remained in use well into the twentieth century, and they played a part in planning "
    "operations where the state of the tide on a particular morning could decide success or failure. Today "
    "the same sums are done by computers in a fraction of a second, and tide tables for thousands of "
    "locations are freely available. Satellites that measure the height of the sea surface from orbit have "
    "also allowed scientists to map the tide across the open ocean, far from any coast.",

    "Tides do more than move water up and down the beach. The friction of tidal currents against the sea "
    "floor slowly drains energy from the rotation of the Earth, lengthening the day by a tiny amount each "
    "century. The same exchange pushes the Moon gradually outward, so it recedes from us by a few "
    "centimetres every year. Over hundreds of millions of years these small changes add up: fossil corals "
    "that grew in daily and yearly bands suggest that a year once contained more days than it does now.",

    "Closer to home, the tide creates some of the richest habitats on the planet. Salt marshes, mud flats "
    "and rock pools are flooded and drained in a reliable rhythm, and the plants and animals that live "
    "there must tolerate both conditions. Barnacles close their shells to keep from drying out, wading "
    "birds follow the edge of the water as it retreats, and many fish use the rising tide to reach feeding "
    "grounds that are dry for half the day. The rhythm of the tide, set in motion by the Moon and the Sun, "
    "ends up governing the daily routine of countless living things.",
)

TEXT = "\n\n".join(PARAGRAPHS)
"""The whole text: the paragraphs separated by blank lines."""


def words(text: str = TEXT) -> list[str]:
    """The whitespace-separated words of a text, in order."""
    return text.split()


def prefix(n_words: int, text: str = TEXT) -> str:
    """The text up to and including its n-th word, with the original spacing (a prompt cut at a word boundary)."""
    if not 0 < n_words <= len(words(text)):
        raise ValueError(f"the text has {len(words(text))} words, not {n_words}")
    ends = [m.end() for m in re.finditer(r"\S+", text)]
    return text[:ends[n_words - 1]]


def sentences(text: str = TEXT) -> tuple[str, ...]:
    """The sentences of a text: split after '.', '!' or '?' followed by whitespace (the text has no abbreviations)."""
    return tuple(s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip())
