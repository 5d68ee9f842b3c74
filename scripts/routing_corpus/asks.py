"""The asks, by task: each task has one label and the material it works on.

A template line is ``LANG: text``; ``LANG`` is ``en``, ``id`` or ``mx`` (Indonesian and English
mixed). Slots (``{name}``, ``{n1}`` ...) are filled per item. Within a task and a language,
every fourth template (positions 3, 7, ...; for the few ``mx`` ones, every second) is held
out: items made from it form the cross-style test split (``make_routing_corpus.py``).

Material: ``None`` (the ask stands alone), ``prose``, ``table``, ``code``, ``trace`` (code and
its traceback), ``tools`` (tool definitions offered), ``chat`` (a long chit-chat message comes
first), ``history`` (earlier turns come first; only the last turn decides).
"""

from __future__ import annotations

from routing_corpus.heavy import HEAVY
from routing_corpus.light import ADDED, LIGHT
from routing_corpus.tasks import Task

__all__ = ["HISTORY", "TASKS", "Task"]

TASKS = LIGHT + HEAVY + ADDED

# -- history turns for multi-turn items: (user, assistant) ---------------------------------------

HISTORY = [
    ("en", "Two trains leave stations 300 km apart at 9:00, at 80 and 70 km/h toward each other. When do they meet?",
     "They close the gap at 150 km/h, so they meet after 2 hours, at 11:00, 160 km from the first station."),
    ("en", "Can you write a short welcome message for new members of our hiking club?",
     "Welcome to the trail family! Our first group hike is this Saturday at 7am; bring water and good shoes."),
    ("en", "What's the probability of getting two sixes with two dice?", "It is 1/6 x 1/6 = 1/36, about 2.8%."),
    ("en", "Why does my Python counter give the wrong total with 8 threads?",
     "count += 1 is a read-modify-write; two threads can read the same value. Guard it with a lock."),
    ("en", "Summarize the main benefits of our new remote work policy.",
     "Up to three remote days a week, a yearly equipment allowance, and fixed office days agreed per team."),
    ("en", "Plan a weekly rota for four nurses so each gets two days off in a row.",
     "Here is a rota: Ana Mon-Tue off, Budi Wed-Thu off, Citra Fri-Sat off, Dewi Sun-Mon off; every day has three on shift."),
    ("id", "Jarak dua kota 300 km, dua mobil berangkat jam 9 dengan 80 dan 70 km/jam saling mendekat. Kapan bertemu?",
     "Mereka mendekat 150 km/jam, jadi bertemu setelah 2 jam, pukul 11.00."),
    ("id", "Bikinin ucapan selamat datang buat anggota baru klub lari kami dong.",
     "Selamat datang di keluarga lari! Latihan bareng pertama hari Minggu jam 6 pagi di taman kota."),
    ("id", "Peluang dapat dua angka enam dari dua dadu berapa?", "Peluangnya 1/36, sekitar 2,8%."),
    ("id", "Kenapa counter Python saya salah total kalau pakai 8 thread?",
     "count += 1 itu baca-ubah-tulis; dua thread bisa membaca nilai yang sama. Pakai lock."),
    ("id", "Ringkas kebijakan kerja jarak jauh yang baru dong.",
     "Maksimal tiga hari dari rumah per minggu, tunjangan peralatan tahunan, dan hari kantor tetap per tim."),
    ("id", "Susun jadwal jaga empat perawat supaya tiap orang libur dua hari berturut-turut.",
     "Ana libur Senin-Selasa, Budi Rabu-Kamis, Citra Jumat-Sabtu, Dewi Minggu-Senin; tiap hari ada tiga yang jaga."),
]
