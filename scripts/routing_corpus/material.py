"""What users paste and products configure: documents, tables, code, tracebacks, tools, system prompts.

Every builder takes a seeded :class:`random.Random` and returns text; slots such as ``{name}``
are filled by the caller's slot table (``make_routing_corpus.slots``). Each pool is split into
a train half and a held-out half by index parity (``held`` argument), so the cross-style test
split sees documents, products and code it never saw in training.
"""

from __future__ import annotations

import json
import random

# -- prose documents: topic -> paragraphs (a document is 2-5 of them, in order) -------------------

PROSE_EN = {
    "memo": [
        "From: {name}, Operations\nTo: all staff at the {city} office\nSubject: changes to the shift rota",
        "Starting on the {day} of next month, the early shift will begin at 6:30 instead of 7:00. The change "
        "follows the new delivery window agreed with our logistics partner, who now arrives before the morning "
        "traffic. Late shifts end thirty minutes earlier to keep the total hours the same.",
        "Staff who cannot make the earlier start should speak to their team lead before the end of the week. "
        "We will try to accommodate childcare and public transport constraints, but we cannot promise every request.",
        "Parking on the east side will be closed for resurfacing during the first two weeks. Please use the "
        "overflow lot behind the warehouse; a shuttle runs every fifteen minutes between 6:00 and 9:00.",
        "Thank you for your patience while we settle into the new schedule. Questions can go to the operations "
        "inbox or to me directly.",
    ],
    "news": [
        "{city} city council voted on Tuesday to extend the bus rapid transit line by {n1} kilometres, linking "
        "the northern suburbs to the central station for the first time.",
        "The project, estimated at {n2} million dollars, will be funded partly by a national grant and partly "
        "by a levy on new commercial developments along the corridor. Construction is expected to start next spring.",
        "Residents along the route raised concerns about noise and the loss of street parking during the public "
        "consultation. The council promised sound barriers near two schools and a review of parking after one year.",
        "Local businesses were divided. Shop owners near the planned stations welcomed the extra foot traffic, "
        "while others worried that two years of roadworks would drive customers to the malls on the ring road.",
        "A spokesperson for the transit authority said buses on the new section would run every six minutes at "
        "peak times and every twelve minutes in the evening.",
    ],
    "product": [
        "Meet the {product}: a compact device designed for people who work from small apartments and shared desks.",
        "It weighs {n1}0 grams, charges over USB-C in about {n3} minutes and runs for a full working day on one "
        "charge. The casing is made from recycled aluminium and comes in three colours.",
        "The companion app lets you set quiet hours, share access with family members and export usage data as "
        "a spreadsheet. Updates arrive automatically over Wi-Fi.",
        "Every unit ships with a two-year warranty, a braided cable and a printed quick-start card. Replacement "
        "parts are sold separately through our online store.",
    ],
    "meeting": [
        "Meeting notes, product sync, {day} {month}\nAttendees: {name}, {name2}, {name3}",
        "1. {name} reported that the checkout redesign is live for ten percent of users. Conversion is flat so "
        "far, but support tickets about payment errors dropped noticeably.",
        "2. {name2} wants to delay the loyalty-points launch by two weeks because the partner API still returns "
        "timeouts under load. Nobody objected, but marketing needs to be told today.",
        "3. {name3} asked who owns the onboarding emails now that the growth team was split. Action: {name} to "
        "draft an ownership proposal by Friday.",
        "4. Next sync moves to Thursday because of the public holiday.",
    ],
    "policy": [
        "Remote work policy, version {n3}.",
        "Employees may work remotely up to three days a week after completing their probation period. Teams can "
        "agree on fixed office days, which must be published in the team calendar.",
        "Equipment bought for home offices is reimbursed up to a yearly limit, on presentation of receipts. Items "
        "remain company property and must be returned when the employee leaves.",
        "Working from another country for more than fourteen days a year needs written approval from HR, because "
        "of tax and insurance rules. Short trips are not affected.",
        "Managers review the arrangement every six months and may ask for more office presence when a project needs it.",
    ],
    "review": [
        "I ordered the {product} after reading a lot of good reviews, and my feelings are mixed.",
        "Delivery to {city} took nine days instead of the promised three, and the box arrived dented. The device "
        "itself was fine, which was a relief.",
        "Setup was easy and the app is clean, but the battery drains much faster than advertised if you keep "
        "notifications on. Support answered quickly and suggested a firmware update, which helped a little.",
        "For the price I expected better build quality. It does the job, though, and I would probably buy it "
        "again if it were on sale.",
    ],
    "email": [
        "Hi {name},",
        "Thanks for sending over the draft contract. Our legal team went through it yesterday and has a few "
        "comments on the liability clause and the payment terms, which they would like to move from 30 to 45 days.",
        "We are also not comfortable with the automatic renewal. Could we change it so that either side must "
        "confirm the renewal in writing a month before the end date?",
        "Apart from that we are happy to proceed. If the changes work for you, we can sign before the end of the "
        "month so the pilot in {city} can start on schedule.",
        "Best regards,\n{name2}",
    ],
    "abstract": [
        "We study how response time affects user satisfaction in customer support chat across {n2} thousand "
        "conversations from an online retailer.",
        "Satisfaction scores fall sharply when the first reply takes longer than two minutes, but the length of "
        "the conversation after that matters much less than whether the issue is resolved in one session.",
        "Agents who used suggested replies answered faster without lowering satisfaction, although customers "
        "rated fully templated answers as less helpful.",
        "We discuss limitations, including the single retailer, the self-selected survey responses and the lack "
        "of data on customers who left before the survey.",
    ],
    "story": [
        "The ferry to the island ran twice a day, and {name} had missed the morning one by four minutes.",
        "She sat on her suitcase at the end of the pier and watched the fishermen mend their nets, trying not to "
        "think about the interview that would start without her.",
        "An old man selling grilled corn asked where she was going. When she told him, he laughed and pointed at "
        "a small wooden boat tied below the pier: his nephew was leaving in ten minutes.",
        "The crossing was rough and she arrived soaked, but she walked into the office with three minutes to spare.",
    ],
}

PROSE_ID = {
    "memo": [
        "Dari: {name}, bagian Operasional\nKepada: seluruh karyawan kantor {city}\nPerihal: perubahan jadwal shift",
        "Mulai tanggal {day} bulan depan, shift pagi dimulai pukul 06.30, bukan lagi 07.00. Perubahan ini "
        "mengikuti jadwal pengiriman baru dari mitra logistik yang kini datang sebelum jam macet.",
        "Karyawan yang tidak bisa datang lebih awal diminta berbicara dengan ketua tim paling lambat akhir pekan "
        "ini. Kami akan berusaha menyesuaikan, tetapi tidak semua permintaan bisa dipenuhi.",
        "Parkir di sisi timur ditutup selama dua minggu pertama karena pengaspalan ulang. Silakan gunakan lahan "
        "cadangan di belakang gudang; tersedia bus antar-jemput setiap lima belas menit.",
        "Terima kasih atas pengertiannya. Pertanyaan bisa dikirim ke email operasional atau langsung ke saya.",
    ],
    "news": [
        "Pemerintah Kota {city} menyetujui perpanjangan jalur bus sepanjang {n1} kilometer yang menghubungkan "
        "kawasan utara dengan stasiun pusat.",
        "Proyek senilai sekitar {n2} miliar rupiah itu dibiayai sebagian dari dana pusat dan sebagian dari "
        "retribusi pembangunan gedung komersial di sepanjang koridor. Pembangunan dijadwalkan mulai tahun depan.",
        "Warga di sekitar rute mengeluhkan potensi kebisingan dan hilangnya lahan parkir di pinggir jalan. "
        "Pemkot berjanji memasang peredam suara di dekat dua sekolah.",
        "Pelaku usaha terbelah. Pemilik toko di dekat halte menyambut baik tambahan pengunjung, sementara yang "
        "lain khawatir dua tahun pengerjaan jalan akan membuat pembeli pindah ke mal.",
        "Juru bicara dinas perhubungan mengatakan bus akan lewat setiap enam menit pada jam sibuk.",
    ],
    "product": [
        "Perkenalkan {product}: perangkat ringkas untuk kamu yang bekerja dari kos atau meja bersama.",
        "Beratnya hanya {n1}0 gram, pengisian daya lewat USB-C sekitar {n3} menit, dan baterainya tahan seharian. "
        "Bodinya dari aluminium daur ulang dan tersedia dalam tiga warna.",
        "Lewat aplikasinya kamu bisa mengatur jam tenang, berbagi akses dengan keluarga, dan mengekspor data "
        "pemakaian ke spreadsheet. Pembaruan dipasang otomatis lewat Wi-Fi.",
        "Setiap unit bergaransi dua tahun dan dilengkapi kabel serta kartu panduan singkat. Suku cadang dijual "
        "terpisah di toko online kami.",
    ],
    "meeting": [
        "Notulen rapat produk, {day} {month}\nHadir: {name}, {name2}, {name3}",
        "1. {name} melaporkan desain ulang halaman pembayaran sudah aktif untuk sepuluh persen pengguna. "
        "Konversi belum berubah, tetapi keluhan soal gagal bayar berkurang.",
        "2. {name2} meminta peluncuran poin loyalitas ditunda dua minggu karena API mitra masih sering timeout. "
        "Tidak ada yang keberatan, tetapi tim pemasaran harus diberi tahu hari ini.",
        "3. {name3} menanyakan siapa pemilik email onboarding setelah tim growth dipecah. Tindak lanjut: {name} "
        "menyusun usulan paling lambat Jumat.",
        "4. Rapat berikutnya dipindah ke Kamis karena tanggal merah.",
    ],
    "policy": [
        "Kebijakan kerja jarak jauh, versi {n3}.",
        "Karyawan boleh bekerja dari rumah maksimal tiga hari seminggu setelah lulus masa percobaan. Tim dapat "
        "menyepakati hari kantor tetap yang dicantumkan di kalender tim.",
        "Peralatan kantor rumah diganti sampai batas tahunan dengan menunjukkan kuitansi. Barang tetap milik "
        "perusahaan dan dikembalikan saat karyawan keluar.",
        "Bekerja dari luar negeri lebih dari empat belas hari setahun memerlukan persetujuan tertulis HR karena "
        "aturan pajak dan asuransi.",
        "Atasan meninjau pengaturan ini setiap enam bulan dan dapat meminta kehadiran lebih sering bila proyek membutuhkan.",
    ],
    "review": [
        "Saya beli {product} karena banyak ulasan bagus, tapi perasaan saya campur aduk.",
        "Pengiriman ke {city} makan waktu sembilan hari padahal dijanjikan tiga, dan kardusnya penyok. Untungnya "
        "barangnya tidak apa-apa.",
        "Pemasangannya gampang dan aplikasinya rapi, tapi baterainya cepat habis kalau notifikasi dinyalakan. CS "
        "cepat membalas dan menyarankan update firmware, lumayan membantu.",
        "Untuk harga segitu saya berharap kualitasnya lebih baik. Tapi fungsinya jalan, mungkin saya beli lagi kalau diskon.",
    ],
    "email": [
        "Halo Pak {name},",
        "Terima kasih sudah mengirimkan draf kontrak. Tim legal kami sudah membacanya kemarin dan ada beberapa "
        "catatan soal klausul tanggung jawab dan termin pembayaran, yang ingin kami ubah dari 30 menjadi 45 hari.",
        "Kami juga kurang nyaman dengan perpanjangan otomatis. Bisakah diubah sehingga perpanjangan harus "
        "dikonfirmasi tertulis oleh kedua pihak sebulan sebelum berakhir?",
        "Selain itu kami siap lanjut. Kalau perubahan ini bisa diterima, kita tanda tangan sebelum akhir bulan "
        "supaya uji coba di {city} bisa mulai sesuai jadwal.",
        "Salam,\n{name2}",
    ],
    "abstract": [
        "Penelitian ini mengkaji pengaruh waktu respons terhadap kepuasan pelanggan pada {n2} ribu percakapan "
        "layanan pelanggan sebuah toko daring.",
        "Skor kepuasan turun tajam bila balasan pertama lebih dari dua menit, sedangkan panjang percakapan "
        "setelahnya tidak terlalu berpengaruh dibanding apakah masalah selesai dalam satu sesi.",
        "Agen yang memakai saran balasan menjawab lebih cepat tanpa menurunkan kepuasan, meski jawaban yang "
        "sepenuhnya templat dinilai kurang membantu.",
        "Keterbatasan penelitian mencakup satu toko saja dan responden survei yang memilih sendiri.",
    ],
    "story": [
        "Kapal ke pulau hanya berangkat dua kali sehari, dan {name} ketinggalan yang pagi hanya selisih empat menit.",
        "Ia duduk di atas kopernya di ujung dermaga, memandangi nelayan yang menjahit jala, berusaha tidak "
        "memikirkan wawancara yang akan dimulai tanpanya.",
        "Seorang bapak penjual jagung bakar bertanya ia mau ke mana. Mendengar jawabannya, bapak itu tertawa dan "
        "menunjuk perahu kayu kecil di bawah dermaga: keponakannya berangkat sepuluh menit lagi.",
        "Penyeberangannya berombak dan ia tiba basah kuyup, tetapi masuk kantor tiga menit sebelum waktunya.",
    ],
}


def prose(rng: random.Random, lang: str, held: bool) -> tuple[str, str]:
    """``(topic, text)``: a document of 2-5 consecutive paragraphs of one topic."""
    pool = PROSE_ID if lang == "id" else PROSE_EN
    topics = [t for i, t in enumerate(sorted(pool)) if (i % 3 == 0) == held]
    topic = rng.choice(topics)
    paragraphs = pool[topic]
    start = rng.randrange(0, max(1, len(paragraphs) - 2))
    count = rng.randint(2, len(paragraphs) - start)
    return topic, "\n\n".join(paragraphs[start:start + count])


# -- tables -------------------------------------------------------------------------------------

def table(rng: random.Random, lang: str, held: bool) -> tuple[str, str]:
    """``(topic, text)``: a CSV, markdown or tab-separated table of random figures."""
    if held:
        topic = rng.choice(["latency", "grades"])
    else:
        topic = rng.choice(["sales", "inventory", "budget"])
    heads = {
        "sales": (["region", "Q1", "Q2", "Q3", "Q4"], ["North", "South", "East", "West", "Central"]),
        "inventory": (["sku", "stock", "reorder_level", "weekly_sales"], ["A-100", "A-220", "B-310", "C-015", "C-404", "D-777"]),
        "budget": (["item", "planned", "actual"], ["rent", "salaries", "marketing", "travel", "software", "training"]),
        "latency": (["service", "p50_ms", "p99_ms", "errors_per_10k"], ["auth", "search", "checkout", "cart", "profile"]),
        "grades": (["student", "quiz1", "quiz2", "midterm", "final"], ["Ayu", "Bima", "Citra", "Dewi", "Eko", "Farah"]),
    }
    if lang == "id":
        heads["sales"] = (["wilayah", "K1", "K2", "K3", "K4"], ["Utara", "Selatan", "Timur", "Barat", "Tengah"])
        heads["budget"] = (["pos", "rencana", "realisasi"], ["sewa", "gaji", "pemasaran", "perjalanan", "lisensi", "pelatihan"])
    cols, names = heads[topic]
    rows = [[name] + [str(rng.randint(5, 400)) for _ in cols[1:]] for name in names[: rng.randint(3, len(names))]]
    style = rng.choice(["csv", "md", "tsv"])
    if style == "csv":
        return topic, "\n".join(",".join(r) for r in [cols] + rows)
    if style == "tsv":
        return topic, "\n".join("\t".join(r) for r in [cols] + rows)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return topic, "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


# -- code and tracebacks ------------------------------------------------------------------------

CODE = [
    ("python", "def average(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n"),
    ("python", "import threading\n\nlock_a = threading.Lock()\nlock_b = threading.Lock()\n\ndef transfer(src, dst, amount):\n"
               "    with lock_a:\n        with lock_b:\n            src.balance -= amount\n            dst.balance += amount\n\n"
               "def refund(src, dst, amount):\n    with lock_b:\n        with lock_a:\n            dst.balance -= amount\n"
               "            src.balance += amount\n"),
    ("javascript", "async function loadUsers(ids) {\n  const users = [];\n  ids.forEach(async (id) => {\n"
                   "    const res = await fetch(`/api/users/${id}`);\n    users.push(await res.json());\n  });\n  return users;\n}\n"),
    ("sql", "SELECT c.name, SUM(o.total) AS revenue\nFROM customers c\nLEFT JOIN orders o ON o.customer_id = c.id\n"
            "WHERE o.created_at >= '2024-01-01'\nGROUP BY c.name\nORDER BY revenue DESC;\n"),
    ("python", "def paginate(items, page, size):\n    start = page * size\n    end = start + size + 1\n    return items[start:end]\n"),
    ("go", "func worker(jobs <-chan int, results chan<- int, wg *sync.WaitGroup) {\n\tfor j := range jobs {\n"
           "\t\tresults <- j * 2\n\t}\n\twg.Done()\n}\n"),
    ("python", "cache = {}\n\ndef get_user(user_id, db):\n    if user_id in cache:\n        return cache[user_id]\n"
               "    user = db.fetch(user_id)\n    cache[user_id] = user\n    return user\n"),
    ("typescript", "export function formatPrice(cents: number, currency = 'IDR'): string {\n"
                   "  return new Intl.NumberFormat('id-ID', { style: 'currency', currency }).format(cents / 100);\n}\n"),
    ("python", "def merge_intervals(intervals):\n    intervals.sort()\n    out = [intervals[0]]\n    for s, e in intervals[1:]:\n"
               "        if s < out[-1][1]:\n            out[-1][1] = max(out[-1][1], e)\n        else:\n            out.append([s, e])\n"
               "    return out\n"),
    ("java", "public class Counter {\n    private int count = 0;\n    public void increment() { count++; }\n"
             "    public int get() { return count; }\n}\n"),
]

TRACES = [
    "Traceback (most recent call last):\n  File \"app/report.py\", line 41, in build\n    avg = average(rows)\n"
    "  File \"app/stats.py\", line 5, in average\n    return total / len(values)\nZeroDivisionError: division by zero",
    "Traceback (most recent call last):\n  File \"worker.py\", line 88, in run\n    payload = json.loads(msg.body)\n"
    "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
    "Exception in thread \"main\" java.lang.NullPointerException\n\tat com.shop.cart.CartService.total(CartService.java:57)\n"
    "\tat com.shop.api.CartController.get(CartController.java:23)",
    "TypeError: Cannot read properties of undefined (reading 'map')\n    at UserList (UserList.jsx:14:23)\n"
    "    at renderWithHooks (react-dom.development.js:16305:18)",
    "Traceback (most recent call last):\n  File \"manage.py\", line 22, in <module>\n    main()\n"
    "ModuleNotFoundError: No module named 'dotenv'",
    "fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [semacquire]:\nsync.runtime_Semacquire(0xc0000b4008)\n"
    "main.main()\n\t/app/main.go:31 +0x1e5",
    "psycopg2.errors.UniqueViolation: duplicate key value violates unique constraint \"orders_pkey\"\n"
    "DETAIL:  Key (id)=(10421) already exists.",
    "RecursionError: maximum recursion depth exceeded while calling a Python object\n  File \"tree.py\", line 12, in depth\n"
    "    return 1 + max(depth(n.left), depth(n.right))",
]


def code(rng: random.Random, held: bool) -> tuple[str, str]:
    """``(language, snippet)``; alternate snippets are held out."""
    pool = [c for i, c in enumerate(CODE) if (i % 3 == 2) == held]
    return rng.choice(pool)


def trace(rng: random.Random, held: bool) -> str:
    pool = [t for i, t in enumerate(TRACES) if (i % 3 == 2) == held]
    return rng.choice(pool)


# -- tools ----------------------------------------------------------------------------------------

def _tool(name: str, description: str, **params: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
        "required": list(params)[:1]}}}


TOOLS = [
    _tool("get_weather", "Current weather and forecast for a city", city="City name", date="ISO date"),
    _tool("search_flights", "Search flights between two airports", origin="IATA code", destination="IATA code", date="ISO date"),
    _tool("lookup_order", "Find an order by its number", order_id="Order number"),
    _tool("create_ticket", "Open a support ticket", subject="Short subject", body="Details"),
    _tool("run_sql", "Run a read-only SQL query on the analytics warehouse", query="SQL text"),
    _tool("send_email", "Send an email", to="Recipient address", subject="Subject", body="Body"),
    _tool("calendar_free_slots", "Free slots of a person's calendar", person="Email", week="ISO week"),
    _tool("convert_currency", "Convert an amount between currencies", amount="Number", source="ISO code", target="ISO code"),
    _tool("search_docs", "Search the internal knowledge base", query="Search terms"),
]


def tools(rng: random.Random) -> list[dict]:
    return rng.sample(TOOLS, rng.randint(1, 4))


# -- system prompts of products -------------------------------------------------------------------

SYSTEMS = [
    ("en", "You are Nova, the support assistant of ShopKita, an online marketplace. Be friendly and concise. "
           "Never promise refunds; direct refund requests to the returns form. Answer in the customer's language."),
    ("id", "Kamu adalah Sari, asisten layanan pelanggan Bank Maju. Jawab dengan sopan dan singkat. Jangan pernah "
           "meminta PIN, OTP, atau kata sandi. Jika ditanya di luar topik perbankan, arahkan kembali dengan ramah."),
    ("en", "You are a senior software engineer helping developers on our internal platform. Prefer idiomatic "
           "Python 3.11, explain trade-offs briefly, and include runnable code."),
    ("en", "You are MathBuddy, a tutor for high-school students. Guide the student, check their work, and show "
           "the steps when asked. Keep a warm, encouraging tone."),
    ("id", "Anda adalah penerjemah profesional. Terjemahkan teks yang diberikan dengan setia pada makna dan "
           "nada aslinya. Jangan menambahkan penjelasan kecuali diminta."),
    ("en", "You are the HR assistant of Lumen Corp. Answer questions about leave, payroll dates and benefits "
           "using the policy excerpts provided. If unsure, say so and suggest contacting HR."),
    ("id", "Kamu adalah asisten perjalanan JalanYuk. Bantu pengguna merencanakan liburan di Indonesia, sarankan "
           "transportasi dan penginapan sesuai anggaran. Gunakan bahasa santai."),
    ("en", "You are a writing assistant inside a note-taking app. Match the user's voice. Output only the "
           "requested text without preamble."),
    ("en", "You are DataPal, an analytics copilot connected to the company warehouse. When a question needs "
           "data, call the run_sql tool. Explain results in plain language."),
    ("id", "Anda adalah asisten hukum untuk UMKM. Jelaskan istilah kontrak dengan bahasa sederhana. Ini bukan "
           "nasihat hukum; sarankan konsultasi dengan notaris untuk keputusan penting."),
    ("en", "You are Kai, a friendly companion chatbot. Keep conversations light and supportive. Do not give "
           "medical, legal or financial advice."),
    ("id", "Kamu adalah asisten coding untuk tim backend kami (Go dan PostgreSQL). Jawab ringkas, sertakan "
           "contoh kode, dan sebutkan risiko performa bila ada."),
    ("en", "You are an email assistant for busy executives. Draft replies that are polite, brief and decisive."),
    ("id", "Kamu guru les matematika untuk siswa SMP. Jelaskan pelan-pelan dan beri semangat."),
]


def system(rng: random.Random, held: bool) -> tuple[str, str]:
    """``(lang, text)``: a product's system prompt; every third one is held out."""
    pool = [s for i, s in enumerate(SYSTEMS) if (i % 3 == 1) == held]
    return rng.choice(pool)


# -- chit-chat openers (long, rambling, no task of their own) -------------------------------------

CHAT_EN = [
    "Ugh, what a week. The office moved us to hot desks, my commute doubled because of the roadworks, and my "
    "sister is staying with us with her two kids, which is lovely but loud. I finally have a quiet evening.",
    "So I've been trying to get back into running. Did 3 km yesterday, felt like dying, but the weather in "
    "{city} was perfect and there's this little coffee stall at the end of the park route.",
    "My cat knocked my plant off the shelf again this morning, soil everywhere, and then sat there looking at "
    "me like it was my fault. Anyway I'm procrastinating on cleaning it up.",
    "Long story short: my friend {name} and I are planning a weekend trip, we've been arguing for days about "
    "beach versus mountains, and I'm tired of deciding things.",
]

CHAT_ID = [
    "Aduh minggu ini capek banget. Kantor pindah ke sistem meja bebas, jalan ke kantor macet parah karena ada "
    "galian, terus adikku nginep bawa dua anaknya. Seru sih tapi rame. Akhirnya malam ini bisa santai.",
    "Jadi aku lagi coba rutin lari lagi. Kemarin 3 km aja udah ngos-ngosan, tapi cuaca di {city} lagi enak "
    "banget dan ada warung kopi kecil di ujung taman.",
    "Kucingku jatuhin pot tanaman lagi tadi pagi, tanah ke mana-mana, terus dia duduk ngeliatin aku kayak aku "
    "yang salah. Sekarang aku males beresinnya.",
    "Singkatnya, aku sama {name} mau liburan akhir pekan, udah berhari-hari debat pantai atau gunung, aku udah "
    "capek mikir.",
]


def chitchat(rng: random.Random, lang: str) -> str:
    return rng.choice(CHAT_ID if lang == "id" else CHAT_EN)


def tool_schema_text(defs: list[dict]) -> str:
    return json.dumps(defs)
