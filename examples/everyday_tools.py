"""Everyday tools for `tooldec run --tools examples/everyday_tools.py`: weather, currency, units.

They answer from fixed tables so that examples and benchmarks are offline and repeatable (the weather is a
snapshot, the rates a day's reference rates); swap the bodies for real services, the signatures are the tools.

    tooldec run "How much is 50 US dollars in euros?" --tools examples/everyday_tools.py
"""

from __future__ import annotations

from typing import Literal

Currency = Literal["USD", "EUR", "GBP", "JPY", "CHF", "CAD", "INR"]
Unit = Literal[
    "km",
    "mile",
    "m",
    "foot",
    "inch",
    "cm",
    "kg",
    "pound",
    "gram",
    "ounce",
    "liter",
    "gallon",
    "celsius",
    "fahrenheit",
]

WEATHER = {  # city: (temperature in Celsius, conditions)
    "paris": (18.0, "light rain"),
    "london": (14.0, "overcast"),
    "tokyo": (23.0, "sunny"),
    "new york": (21.0, "partly cloudy"),
    "berlin": (12.0, "rain"),
    "sydney": (26.0, "sunny"),
}
USD_PER_UNIT = {"USD": 1.0, "EUR": 1.08, "GBP": 1.27, "JPY": 0.0067, "CHF": 1.13, "CAD": 0.73, "INR": 0.012}
TO_BASE = {  # factor to the SI base of the unit's kind (m, kg, liter)
    "km": 1000.0,
    "mile": 1609.344,
    "m": 1.0,
    "foot": 0.3048,
    "inch": 0.0254,
    "cm": 0.01,
    "kg": 1.0,
    "pound": 0.45359237,
    "gram": 0.001,
    "ounce": 0.028349523125,
    "liter": 1.0,
    "gallon": 3.785411784,
}
KIND = {
    u: k
    for k, units in {
        "length": "km mile m foot inch cm",
        "mass": "kg pound gram ounce",
        "volume": "liter gallon",
    }.items()
    for u in units.split()
}


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
    """Get the current weather in a city: temperature and conditions."""
    try:
        celsius, conditions = WEATHER[city.strip().lower()]
    except KeyError:
        raise ValueError(f"no weather for {city!r}; known: {', '.join(c.title() for c in WEATHER)}") from None
    if unit == "fahrenheit":
        return f"{celsius * 9 / 5 + 32:g} °F, {conditions}"
    return f"{celsius:g} °C, {conditions}"


def convert_currency(amount: float, from_currency: Currency, to_currency: Currency) -> float:
    """Convert an amount of money from one currency to another (ISO codes: USD, EUR, GBP, JPY, CHF, CAD, INR)."""
    return round(amount * USD_PER_UNIT[from_currency] / USD_PER_UNIT[to_currency], 2)


def convert_units(value: float, from_unit: Unit, to_unit: Unit) -> float:
    """Convert a length, mass, volume or temperature from one unit to another."""
    if {from_unit, to_unit} <= {"celsius", "fahrenheit"}:
        if from_unit == to_unit:
            return value
        return round(value * 9 / 5 + 32 if from_unit == "celsius" else (value - 32) * 5 / 9, 4)
    if KIND.get(from_unit) is None or KIND.get(from_unit) != KIND.get(to_unit):
        raise ValueError(f"cannot convert {from_unit} to {to_unit}")
    return round(value * TO_BASE[from_unit] / TO_BASE[to_unit], 4)
