"""The light tasks (see ``asks.py`` for the template format)."""

from __future__ import annotations

from routing_corpus.tasks import make_task

LIGHT = [
    make_task("summarize", False, "prose", """
        en: Summarize this in three bullet points.
        en: tl;dr please
        en: Can you give me a short summary of the text below? Two sentences max.
        en: What are the main points here? Keep it brief.
        en: Condense the following into one paragraph for a busy manager.
        en: I don't have time to read all this, what does it say?
        en: Boil this down to a headline and one line of context.
        en: Write a summary I can paste into Slack.
        id: Tolong ringkas teks berikut jadi tiga poin.
        id: Intinya apa ya dari tulisan ini?
        id: Buatkan rangkuman singkat, maksimal dua kalimat.
        id: Rangkum untuk atasan saya yang sibuk, satu paragraf saja.
        id: Apa poin-poin utamanya? Singkat aja.
        id: Aku nggak sempat baca semua, isinya tentang apa?
        id: Bikin ringkasan yang bisa aku tempel di grup WA kantor.
        id: Jadikan satu judul dan satu kalimat penjelasan.
        mx: Tolong summarize ini dong, poin-poinnya aja.
        mx: Can you ringkas this jadi 3 bullet?
    """),
    make_task("translate", False, "prose", """
        en: Translate this into Indonesian.
        en: Please translate the following to English, keep the tone.
        en: Can you put this into natural Indonesian? It's for our customers.
        en: Translate to Indonesian, formal register.
        en: I need this in English for a client, please translate.
        en: Translate the text below into Bahasa Indonesia and keep the line breaks.
        id: Terjemahkan ke bahasa Inggris ya.
        id: Tolong terjemahin ini ke bahasa Indonesia yang natural.
        id: Terjemahkan teks berikut ke bahasa Inggris dengan gaya formal.
        id: Bisa bantu alihbahasakan ke English? Buat klien.
        id: Terjemahkan ke bahasa Inggris, jangan ubah format paragrafnya.
        id: Ubah ke bahasa Indonesia baku, ini untuk surat resmi.
        mx: Translate ke English dong, buat email ke bos.
        mx: Please terjemahkan ini, keep it casual.
    """),
    make_task("translate_sentence", False, None, """
        en: Translate "{sentence_id}" into English.
        en: How do I say "{sentence_en}" in Indonesian?
        en: What does "{sentence_id}" mean?
        en: Quick one: "{sentence_en}" in Bahasa?
        id: Apa bahasa Inggrisnya "{sentence_id}"?
        id: Terjemahkan: "{sentence_en}"
        id: Kalau "{sentence_en}" artinya apa ya?
        id: Bahasa Indonesianya "{sentence_en}" gimana?
    """),
    make_task("extract", False, "prose", """
        en: List every person mentioned and their role.
        en: Pull out all the dates and deadlines from this.
        en: Extract the action items, one per line.
        en: Which cities and places are mentioned? Just the names.
        en: Give me the key numbers from this text as a list.
        en: Find all the commitments made in this and who made them.
        id: Sebutkan semua nama orang yang ada di teks ini.
        id: Ambil semua tanggal dan tenggat waktunya.
        id: Daftar tindak lanjut dari notulen ini, satu per baris.
        id: Tempat apa saja yang disebut? Namanya saja.
        id: Keluarkan angka-angka penting dari teks berikut.
        id: Siapa saja yang punya tugas di sini?
        mx: Extract nama-nama orangnya aja dong.
    """),
    make_task("reformat", False, "table", """
        en: Convert this table to JSON, one object per row.
        en: Turn this into a markdown table.
        en: Can you reformat this as CSV with a header row?
        en: Sort these rows by the second column, descending, and give the table back.
        en: Make this into a YAML list.
        en: Rename the columns to snake_case and output the same table.
        id: Ubah tabel ini jadi JSON, satu objek per baris.
        id: Jadikan tabel markdown ya.
        id: Format ulang jadi CSV dengan baris judul.
        id: Urutkan berdasarkan kolom kedua dari besar ke kecil.
        id: Tolong rapikan tabel ini biar enak dibaca.
        id: Ganti nama kolomnya pakai huruf kecil semua.
        mx: Convert ke JSON dong tabel ini.
    """),
    make_task("classify", False, "prose", """
        en: Is this review positive, negative or mixed? One word.
        en: Classify the sentiment of this text.
        en: Label this message: complaint, question, praise or other.
        en: What's the tone of this email, friendly or annoyed?
        en: Which department should handle this: billing, logistics or tech support?
        en: Tag this text with up to three topics.
        id: Tentukan sentimen ulasan ini: positif, negatif, atau campuran.
        id: Ini termasuk keluhan, pertanyaan, atau pujian?
        id: Klasifikasikan teks berikut ke salah satu kategori: pengiriman, pembayaran, produk.
        id: Nada emailnya gimana, ramah atau kesal?
        id: Kasih label topik untuk teks ini, maksimal tiga.
        id: Tentukan bahasa dan sentimen dari pesan berikut.
        mx: Sentimennya positif atau negatif? Jawab satu kata aja.
    """),
    make_task("rewrite", False, "prose", """
        en: Rewrite this in a friendlier tone.
        en: Proofread this and fix any typos.
        en: Make this sound more professional.
        en: Shorten this to half its length without losing the meaning.
        en: Can you make this easier to read for non-native speakers?
        en: Rephrase this so it doesn't sound so passive-aggressive.
        id: Tulis ulang dengan nada yang lebih ramah.
        id: Tolong perbaiki ejaan dan tata bahasanya.
        id: Buat lebih formal, ini untuk atasan.
        id: Persingkat jadi setengahnya tanpa menghilangkan maksud.
        id: Parafrasekan biar nggak kelihatan copas.
        id: Bikin bahasanya lebih santai buat postingan Instagram.
        mx: Rewrite biar lebih sopan dong.
    """),
    make_task("lookup_in_text", False, "prose", """
        en: According to this, when does the change start?
        en: Who wrote this and who is it addressed to?
        en: Does the text say anything about parking?
        en: What does the second paragraph say about the budget?
        en: Where is this happening?
        en: Is there a deadline mentioned? Quote it.
        id: Menurut teks ini, perubahan mulai kapan?
        id: Siapa pengirim dan penerimanya?
        id: Ada info soal parkir nggak di situ?
        id: Paragraf kedua bilang apa soal biaya?
        id: Kejadiannya di kota mana?
        id: Ada tenggat waktu yang disebut? Kutip kalimatnya.
    """),
    make_task("code_light", False, "code", """
        en: Add docstrings to this.
        en: Add type hints, don't change the behaviour.
        en: Rename the variables to something more descriptive.
        en: Convert this to TypeScript.
        en: Add comments explaining each line, for a beginner.
        en: What does this function do, in one sentence?
        en: Format this according to the usual style guide.
        en: Write a README snippet describing how to call this.
        id: Tambahkan docstring ke kode ini.
        id: Tambahkan type hint tanpa mengubah perilakunya.
        id: Ganti nama variabelnya biar lebih jelas.
        id: Tolong ubah ke JavaScript.
        id: Kasih komentar di tiap baris untuk pemula.
        id: Fungsi ini gunanya apa? Satu kalimat saja.
        id: Rapikan formatnya sesuai standar.
        mx: Tambahin docstring dan type hints dong.
    """),
    make_task("error_light", False, "trace", """
        en: Which file and line raised this?
        en: What's the name of the exception here?
        en: Translate this error message into Indonesian for our support docs.
        en: Format this log so I can paste it into a ticket.
        id: Error ini muncul di file dan baris berapa?
        id: Nama exception-nya apa?
        id: Terjemahkan pesan error ini ke bahasa Indonesia untuk dokumentasi.
        id: Rapikan log ini supaya bisa ditempel di tiket.
    """),
    make_task("facts", False, None, """
        en: What is the capital of {country}?
        en: What does HTTP stand for?
        en: Who wrote Pride and Prejudice?
        en: When is Indonesia's independence day?
        en: What is a mutex, in one sentence?
        en: Define "amortized time" briefly.
        en: What's the difference between TCP and UDP, in a line or two?
        en: Explain why the sky is blue in one sentence for a kid.
        en: What is the time complexity of binary search?
        en: What does the Pythagorean theorem say?
        id: Ibu kota {country} apa?
        id: Singkatan dari HTTP itu apa?
        id: Siapa presiden pertama Indonesia?
        id: Apa itu inflasi? Jelaskan singkat.
        id: Bedanya TCP dan UDP apa, singkat aja.
        id: Apa arti kata "mangkus"?
        id: Kompleksitas waktu binary search berapa?
        id: Teorema Pythagoras bunyinya gimana?
        id: Kenapa langit biru? Jawab satu kalimat buat anak SD.
        mx: Apa itu API gateway, explain singkat aja.
    """),
    make_task("write_short", False, None, """
        en: Write a haiku about {city} in the rain.
        en: Draft a two-line birthday message for my colleague {name}.
        en: Give me five name ideas for a coffee shop.
        en: Write a tweet announcing our new {product}.
        en: Write a short letter to my landlord to prove that I paid the deposit in full.
        en: Write a thank-you note to {name} for covering my shift.
        en: Come up with a catchy slogan for a bike repair shop.
        en: Write an out-of-office reply, I'm back on the {day}.
        en: Give me a caption for a beach photo, something funny.
        en: Write a LinkedIn post about finishing my first marathon, not too cheesy.
        id: Buatkan pantun untuk pembukaan acara kantor.
        id: Tulis ucapan ulang tahun singkat untuk {name}.
        id: Kasih lima ide nama untuk warung kopi.
        id: Buat caption Instagram untuk foto liburan di {city}.
        id: Buatkan surat pernyataan untuk membuktikan bahwa saya sudah melunasi cicilan.
        id: Tulis pesan terima kasih untuk {name} yang sudah bantu pindahan.
        id: Bikin slogan untuk bengkel sepeda.
        id: Buatkan puisi pendek tentang hujan sore.
        id: Tulis balasan email cuti, saya kembali tanggal {day}.
        id: Buat deskripsi produk singkat untuk {product}, gaya jualan online.
        mx: Bikinin caption buat post launching {product} dong, yang catchy.
    """),
    make_task("chitchat", False, "chat", """
        en: Anyway, any ideas for a chill evening?
        en: Do you have any tips for a rainy weekend?
        en: What should I cook tonight, something easy?
        en: Recommend me a movie, nothing too heavy.
        en: Sorry for the rant, how's your day going?
        en: What would you do in my place, just honestly?
        id: Btw, ada ide buat malam santai nggak?
        id: Enaknya ngapain ya pas hujan gini?
        id: Rekomendasi film yang ringan dong.
        id: Masak apa ya malam ini, yang gampang?
        id: Maaf jadi curhat, kamu gimana kabarnya?
        id: Kalau kamu jadi aku, bakal ngapain?
        mx: Anyway, rekomendasi playlist buat santai dong.
    """),
    make_task("arith_light", False, None, """
        en: How many grams are in {n1}.5 kilograms?
        en: How many minutes is {n1} hours?
        en: What's {n3}% of {n5}?
        en: Convert {n2} Fahrenheit to Celsius.
        en: How much is {n6} cents in dollars?
        en: What is {n2} plus {n5}?
        en: How many centimetres in {n1} metres?
        id: Berapa gram {n1},5 kilogram?
        id: {n1} jam itu berapa menit?
        id: {n3} persen dari {n5} berapa?
        id: Berapa cm dalam {n1} meter?
        id: Hitung {n2} ditambah {n5}.
        id: Tentukan hasil {n4} kali {n3}.
        mx: Berapa USD kalau {n6} cents?
    """),
    make_task("tool_simple", False, "tools", """
        en: What's the weather in {city} tomorrow?
        en: Where is my order {n6}?
        en: Convert {n5} euros to rupiah.
        en: Open a ticket: my invoice shows the wrong address.
        en: Search the docs for how to reset my password.
        en: Send an email to {name} saying I'll be ten minutes late.
        id: Cuaca di {city} besok gimana?
        id: Pesanan saya nomor {n6} sudah sampai mana?
        id: Tolong konversi {n5} dolar ke rupiah.
        id: Buatkan tiket: alamat di faktur saya salah.
        id: Cari di dokumentasi cara ganti kata sandi.
        id: Kirim email ke {name} bilang saya telat sepuluh menit.
        mx: Cek weather di {city} buat besok dong.
    """),
    make_task("json_extract", False, "prose", """
        en: Return a JSON object with the fields author, date and topic.
        en: Extract the people as JSON: [{"name": ..., "role": ...}].
        en: Give me {"summary": ..., "sentiment": ...} for this text.
        en: Output JSON with keys title and keywords.
        id: Kembalikan objek JSON berisi pengirim, tanggal, dan topik.
        id: Ambil nama orang dalam format JSON: [{"nama": ..., "peran": ...}].
        id: Berikan {"ringkasan": ..., "sentimen": ...} untuk teks ini.
        id: Keluarkan JSON dengan kunci judul dan kata_kunci.
    """, json_mode=True),
    make_task("followup_light", False, "history", """
        en: Thanks! Can you make that shorter?
        en: Great, now put it in a table.
        en: Perfect. Translate your answer into Indonesian please.
        en: Cool, thanks a lot!
        en: Can you make it sound less formal?
        en: OK, just give me the final answer without the explanation.
        id: Makasih! Bisa dipersingkat?
        id: Mantap, sekarang buat jadi tabel.
        id: Oke, terjemahkan jawabanmu ke bahasa Inggris ya.
        id: Sip, terima kasih banyak!
        id: Bisa dibuat lebih santai bahasanya?
        id: Jawaban akhirnya aja, nggak usah penjelasan.
        mx: Thanks ya! Bikin versi bullet points dong.
    """),
]

ADDED = [  # tasks written after the first release of the corpus: generated last, so earlier items stay as they were
    make_task("explain_concept", False, None, """
        en: What's the difference between a list and a tuple in Python?
        en: Explain what a foreign key is, briefly.
        en: What does this regex match: ^[a-z]+@[a-z]+\\.com$ ?
        en: Can you explain recursion like I'm five?
        en: What's the difference between weather and climate?
        en: In simple terms, what is compound interest?
        en: What is the difference between "affect" and "effect"?
        en: Explain what Docker does in two sentences.
        id: Apa bedanya list dan tuple di Python?
        id: Jelaskan singkat apa itu foreign key.
        id: Regex ^[0-9]{4}$ itu artinya apa?
        id: Jelasin rekursi kayak ke anak kecil dong.
        id: Apa bedanya cuaca dan iklim?
        id: Bunga majemuk itu apa, secara sederhana?
        id: Bedanya "di" disambung dan dipisah apa?
        id: Docker itu buat apa? Dua kalimat aja.
        mx: Apa sih bedanya REST sama GraphQL, explain singkat aja.
        mx: Bedanya git merge sama rebase apa? Singkat aja ya.
    """),
]
