"""50 extraction tasks for ``bench/extraction_bench.py``: a short text, a schema and the expected JSON.

Three kinds: people (name, age, city, occupation), products (name, price, in stock) and meetings
(title, weekday, hour on a 24-hour clock, number of attendees). Each text states every field once.
"""
from __future__ import annotations

from typing import Any

PERSON = {"type": "object", "additionalProperties": False,
          "required": ["name", "age", "city", "occupation"],
          "properties": {"name": {"type": "string", "maxLength": 40},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "city": {"type": "string", "maxLength": 40},
                         "occupation": {"type": "string", "maxLength": 40}}}
PRODUCT = {"type": "object", "additionalProperties": False,
           "required": ["name", "price", "in_stock"],
           "properties": {"name": {"type": "string", "maxLength": 40},
                          "price": {"type": "number", "minimum": 0},
                          "in_stock": {"type": "boolean"}}}
MEETING = {"type": "object", "additionalProperties": False,
           "required": ["title", "weekday", "hour", "attendees"],
           "properties": {"title": {"type": "string", "maxLength": 40},
                          "weekday": {"enum": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday",
                                               "Saturday", "Sunday"]},
                          "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                          "attendees": {"type": "integer", "minimum": 1}}}

_PEOPLE = [
    ("Maria Lopez, 34, is a nurse in Madrid.", "Maria Lopez", 34, "Madrid", "nurse"),
    ("John Smith is a 52-year-old teacher living in Boston.", "John Smith", 52, "Boston", "teacher"),
    ("Aiko Tanaka (27) works as an engineer in Osaka.", "Aiko Tanaka", 27, "Osaka", "engineer"),
    ("In Lyon, the baker Pierre Martin turned 45 last week.", "Pierre Martin", 45, "Lyon", "baker"),
    ("Fatima Khan, a pilot from Dubai, is 39 years old.", "Fatima Khan", 39, "Dubai", "pilot"),
    ("Carlos Ruiz is a lawyer. He is 61 and lives in Lima.", "Carlos Ruiz", 61, "Lima", "lawyer"),
    ("Meet Anna Berg: 23, student, from Oslo.", "Anna Berg", 23, "Oslo", "student"),
    ("The chef Luca Rossi, aged 38, runs a kitchen in Rome.", "Luca Rossi", 38, "Rome", "chef"),
    ("Priya Patel is 31 and works as a doctor in Mumbai.", "Priya Patel", 31, "Mumbai", "doctor"),
    ("Tom Becker, 47, a plumber, lives in Berlin.", "Tom Becker", 47, "Berlin", "plumber"),
    ("Sofia Costa lives in Lisbon, where she works as an architect; she is 36.", "Sofia Costa", 36,
     "Lisbon", "architect"),
    ("Ahmed Hassan, 29-year-old journalist, Cairo.", "Ahmed Hassan", 29, "Cairo", "journalist"),
    ("Emma Wilson is a farmer near Dublin. She is 58.", "Emma Wilson", 58, "Dublin", "farmer"),
    ("Kenji Sato, a 44-year-old dentist, practises in Tokyo.", "Kenji Sato", 44, "Tokyo", "dentist"),
    ("Olga Ivanova, who is 50, teaches music in Kyiv as a pianist.", "Olga Ivanova", 50, "Kyiv", "pianist"),
    ("Liam Murphy (19) is a waiter in Cork.", "Liam Murphy", 19, "Cork", "waiter"),
    ("Chen Wei is an accountant from Shanghai, 33 years old.", "Chen Wei", 33, "Shanghai", "accountant"),
    ("Grace Okafor, 41, works as a pharmacist in Lagos.", "Grace Okafor", 41, "Lagos", "pharmacist"),
    ("The painter Jonas Weber is 66 and lives in Zurich.", "Jonas Weber", 66, "Zurich", "painter"),
    ("Isabel Santos, a 28-year-old nurse, lives in Porto.", "Isabel Santos", 28, "Porto", "nurse"),
]
_PRODUCTS = [
    ("The blue kettle costs $24.99 and is in stock.", "blue kettle", 24.99, True),
    ("Wireless mouse: 15 dollars, currently sold out.", "wireless mouse", 15, False),
    ("Our desk lamp is available for 39.5 dollars.", "desk lamp", 39.5, True),
    ("The hiking boots are out of stock; they cost $120.", "hiking boots", 120, False),
    ("Green tea, 4.25 dollars a box, in stock now.", "green tea", 4.25, True),
    ("A yoga mat sells for $30 but none are left.", "yoga mat", 30, False),
    ("The coffee grinder ($59) ships today from stock.", "coffee grinder", 59, True),
    ("Notebook, price 2.5 dollars, available.", "notebook", 2.5, True),
    ("The electric scooter at $499 is currently unavailable.", "electric scooter", 499, False),
    ("Phone case for 12.75 dollars: in stock.", "phone case", 12.75, True),
    ("The winter jacket costs 89 dollars and is sold out.", "winter jacket", 89, False),
    ("Steel water bottle, $18, plenty in stock.", "steel water bottle", 18, True),
    ("The chess set is priced at $45 and is out of stock.", "chess set", 45, False),
    ("USB cable: 7.99 dollars, available now.", "USB cable", 7.99, True),
    ("The standing desk costs $350; it is in stock.", "standing desk", 350, True),
]
_MEETINGS = [
    ("Budget review on Monday at 10:00 with 6 people.", "Budget review", "Monday", 10, 6),
    ("The design sync is Tuesday at 14:00; 4 attendees.", "design sync", "Tuesday", 14, 4),
    ("Team lunch, Friday 12:00, 9 people coming.", "Team lunch", "Friday", 12, 9),
    ("Quarterly planning happens on Wednesday at 9:00 with 12 participants.", "Quarterly planning",
     "Wednesday", 9, 12),
    ("Code review: Thursday, 16:00, 3 engineers.", "Code review", "Thursday", 16, 3),
    ("Board meeting on Monday at 8:00, 7 members attend.", "Board meeting", "Monday", 8, 7),
    ("The sales call is on Friday at 15:00 with 2 people.", "sales call", "Friday", 15, 2),
    ("Hiring panel Tuesday 11:00, five interviewers.", "Hiring panel", "Tuesday", 11, 5),
    ("Sprint demo on Thursday at 13:00 for 20 people.", "Sprint demo", "Thursday", 13, 20),
    ("Safety training, Wednesday at 17:00, 15 staff.", "Safety training", "Wednesday", 17, 15),
    ("The book club meets Saturday at 18:00, 8 readers.", "book club", "Saturday", 18, 8),
    ("Product launch rehearsal: Sunday, 10:00, 10 people.", "Product launch rehearsal", "Sunday", 10, 10),
    ("One-on-one on Monday at 9:00 with 2 attendees.", "One-on-one", "Monday", 9, 2),
    ("Architecture review Friday 14:00, 6 people.", "Architecture review", "Friday", 14, 6),
    ("Retrospective on Wednesday at 15:00 with 7 team members.", "Retrospective", "Wednesday", 15, 7),
]


def tasks() -> list[dict[str, Any]]:
    """The 50 tasks: ``{"text", "instruction", "schema", "expected"}``."""
    out: list[dict[str, Any]] = []
    for text, name, age, city, job in _PEOPLE:
        out.append({"text": text, "schema": PERSON,
                    "instruction": "Extract the person as JSON with name, age, city and occupation.",
                    "expected": {"name": name, "age": age, "city": city, "occupation": job}})
    for text, name, price, stock in _PRODUCTS:
        out.append({"text": text, "schema": PRODUCT,
                    "instruction": "Extract the product as JSON with name, price (a number) and in_stock (true or false).",
                    "expected": {"name": name, "price": price, "in_stock": stock}})
    for text, title, day, hour, n in _MEETINGS:
        out.append({"text": text, "schema": MEETING,
                    "instruction": "Extract the meeting as JSON with title, weekday, hour (0-23) and attendees (a number).",
                    "expected": {"title": title, "weekday": day, "hour": hour, "attendees": n}})
    assert len(out) == 50
    return out
