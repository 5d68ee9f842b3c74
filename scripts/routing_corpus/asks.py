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

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    name: str
    needs_reasoning: bool
    material: str | None
    templates: tuple[tuple[str, str], ...]  # (lang, text)
    json_mode: bool = False


def _task(name: str, needs: bool, material: str | None, text: str, json_mode: bool = False) -> Task:
    lines = []
    for raw in text.strip().splitlines():
        raw = raw.strip()
        if raw:
            lang, _, body = raw.partition(":")
            lines.append((lang.strip(), body.strip().replace("\\n", "\n")))
    return Task(name, needs, material, tuple(lines), json_mode)


LIGHT = [
    _task("summarize", False, "prose", """
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
    _task("translate", False, "prose", """
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
    _task("translate_sentence", False, None, """
        en: Translate "{sentence_id}" into English.
        en: How do I say "{sentence_en}" in Indonesian?
        en: What does "{sentence_id}" mean?
        en: Quick one: "{sentence_en}" in Bahasa?
        id: Apa bahasa Inggrisnya "{sentence_id}"?
        id: Terjemahkan: "{sentence_en}"
        id: Kalau "{sentence_en}" artinya apa ya?
        id: Bahasa Indonesianya "{sentence_en}" gimana?
    """),
    _task("extract", False, "prose", """
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
    _task("reformat", False, "table", """
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
    _task("classify", False, "prose", """
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
    _task("rewrite", False, "prose", """
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
    _task("lookup_in_text", False, "prose", """
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
    _task("code_light", False, "code", """
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
    _task("error_light", False, "trace", """
        en: Which file and line raised this?
        en: What's the name of the exception here?
        en: Translate this error message into Indonesian for our support docs.
        en: Format this log so I can paste it into a ticket.
        id: Error ini muncul di file dan baris berapa?
        id: Nama exception-nya apa?
        id: Terjemahkan pesan error ini ke bahasa Indonesia untuk dokumentasi.
        id: Rapikan log ini supaya bisa ditempel di tiket.
    """),
    _task("facts", False, None, """
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
    _task("write_short", False, None, """
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
    _task("chitchat", False, "chat", """
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
    _task("arith_light", False, None, """
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
    _task("tool_simple", False, "tools", """
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
    _task("json_extract", False, "prose", """
        en: Return a JSON object with the fields author, date and topic.
        en: Extract the people as JSON: [{"name": ..., "role": ...}].
        en: Give me {"summary": ..., "sentiment": ...} for this text.
        en: Output JSON with keys title and keywords.
        id: Kembalikan objek JSON berisi pengirim, tanggal, dan topik.
        id: Ambil nama orang dalam format JSON: [{"nama": ..., "peran": ...}].
        id: Berikan {"ringkasan": ..., "sentimen": ...} untuk teks ini.
        id: Keluarkan JSON dengan kunci judul dan kata_kunci.
    """, json_mode=True),
    _task("followup_light", False, "history", """
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

HEAVY = [
    _task("word_problem", True, None, """
        en: A train leaves {city} at 8:00 going {n2} km/h; another leaves {city2}, {n5} km away, at 9:00 going {n3}0 km/h toward it. When and where do they meet?
        en: {name} can paint a fence in {n1} hours and {name2} in {n3} hours. Working together after {name} has already done an hour alone, how long until it's finished?
        en: A shop raises a price by {n3}% and later cuts it by {n3}%. A customer says it's back to the original. Is that right, and what is the net change?
        en: I invest {n6} dollars at {n4}% a year compounded monthly and add {n2} every month. What do I have after {n1} years? Show the working.
        en: A tank holds {n5} litres. One pipe fills it in {n3} minutes, a drain empties it in {n2} minutes. Starting half full with both open, when is it full?
        en: {name} is {n4} times as old as her son; in {n3} years she'll be twice as old. How old are they now?
        en: A car uses {n4}.5 litres per 100 km in town and {n4} on the highway. A {n5} km trip is {n3}% town. Fuel at {n6} rupiah a litre: total cost?
        en: Three workers produce {n2}, {n3} and {n5} parts an hour, with defect rates {n4}%, {n1}% and 1%. What share of defective parts comes from the second worker?
        en: If the bill is {n6} and we split it so that {name} pays twice what {name2} pays and {name3} pays {n2} less than {name}, who pays what?
        id: Kereta dari {city} berangkat pukul 08.00 dengan kecepatan {n2} km/jam, kereta lain dari {city2} yang berjarak {n5} km berangkat pukul 09.00 dengan {n3}0 km/jam ke arah berlawanan. Kapan dan di mana mereka bertemu?
        id: {name} bisa mengecat pagar dalam {n1} jam, {name2} dalam {n3} jam. Kalau {name} sudah kerja sendiri satu jam dulu, berapa lama lagi selesai kalau dikerjakan berdua?
        id: Harga barang naik {n3}% lalu turun {n3}%. Apakah harganya kembali seperti semula? Berapa perubahan bersihnya?
        id: Saya menabung {n6} ribu dengan bunga {n4}% per tahun dimajemukkan bulanan, plus setoran {n2} ribu tiap bulan. Berapa saldo setelah {n1} tahun?
        id: Tangki berisi {n5} liter. Keran mengisi penuh dalam {n3} menit, saluran pembuangan mengosongkan dalam {n2} menit. Mulai setengah penuh dan keduanya terbuka, kapan penuh?
        id: Umur ibu {n4} kali umur anaknya; {n3} tahun lagi umurnya dua kali umur anak. Berapa umur mereka sekarang?
        id: Kalau tagihan {n6} ribu dibagi sehingga {name} bayar dua kali {name2}, dan {name3} bayar {n2} ribu lebih sedikit dari {name}, masing-masing bayar berapa?
        id: Sebuah toko memberi diskon {n3}% lalu diskon tambahan {n1}% dari harga setelah diskon. Apakah sama dengan diskon {n3}+{n1} persen? Jelaskan selisihnya.
        mx: Kalau aku lari {n1} km per hari dan tiap minggu nambah {n4}%, kapan aku tembus {n2} km per minggu? Pls hitungin.
        mx: Gaji aku {n6} ribu, naik {n4}% tiap tahun, inflasi {n1}%. Real income-nya setelah {n3} tahun naik atau turun berapa persen?
    """),
    _task("probability", True, None, """
        en: I roll two dice. What's the probability the product is even?
        en: Out of {n2} people, what's the chance at least two share a birthday? Roughly, and how did you get it?
        en: A bag has {n1} red and {n3} blue marbles. I draw three without replacement. Probability of exactly two red?
        en: How many ways can {n1} people sit around a round table if two of them refuse to sit together?
        en: A test is 99% accurate and the disease affects 1 in {n5}. I tested positive. How worried should I be?
        en: How many distinct arrangements of the letters in {word} are there?
        en: If I flip a coin until I get two heads in a row, how many flips do I expect?
        id: Dua dadu dilempar. Berapa peluang hasil kalinya genap?
        id: Dari {n2} orang, berapa peluang minimal dua orang ulang tahunnya sama?
        id: Kantong berisi {n1} kelereng merah dan {n3} biru. Diambil tiga sekaligus, peluang tepat dua merah?
        id: Ada berapa cara {n1} orang duduk melingkar kalau dua orang tidak mau bersebelahan?
        id: Tes akurat 99%, penyakitnya diderita 1 dari {n5} orang. Saya positif. Seberapa besar kemungkinan saya benar-benar sakit?
        id: Berapa banyak susunan berbeda dari huruf-huruf kata {word}?
        id: Koin dilempar terus sampai muncul dua gambar berturut-turut. Rata-rata butuh berapa lemparan?
        mx: Peluang dapet minimal satu angka 6 kalau lempar dadu {n4} kali berapa? Jelasin caranya.
    """),
    _task("proof", True, None, """
        en: Prove that the square root of 2 is irrational.
        en: Show that the sum of the first n odd numbers is n squared.
        en: Prove there are infinitely many primes of the form 4k+3.
        en: Is it true that every graph with n vertices and n edges has a cycle? Prove or give a counterexample.
        en: Prove by induction that 3^n - 1 is even for all n >= 1.
        en: Show that among any {n4} integers, two have a difference divisible by {n1}.
        id: Buktikan bahwa akar 2 adalah bilangan irasional.
        id: Tunjukkan bahwa jumlah n bilangan ganjil pertama sama dengan n kuadrat.
        id: Buktikan dengan induksi bahwa 5^n - 1 habis dibagi 4.
        id: Benarkah setiap graf dengan n simpul dan n sisi punya siklus? Buktikan atau beri contoh penyangkal.
        id: Buktikan tidak ada bilangan bulat x sehingga x^2 = 4k + 3.
        id: Tunjukkan bahwa hasil kali tiga bilangan bulat berurutan selalu habis dibagi 6.
        mx: Tolong prove kalau n^3 - n selalu habis dibagi 6.
    """),
    _task("short_puzzle", True, None, """
        en: Is {big} prime?
        en: Which is bigger, 2^{n2} or 3^{n3}?
        en: How many trailing zeros does {n5}! have?
        en: Remainder of 7^{n5} divided by {n4}?
        en: What's the last digit of 3^{n6}?
        en: Smallest number divisible by every integer from 1 to {n1}?
        en: I have {n4} coins totalling {n2} cents, no pennies. What are they?
        en: Clock shows 3:{n3}. Angle between the hands?
        id: Apakah {big} bilangan prima?
        id: Mana yang lebih besar, 2^{n2} atau 3^{n3}?
        id: {n5}! punya berapa angka nol di belakang?
        id: Sisa pembagian 7^{n5} oleh {n4}?
        id: Angka satuan dari 3^{n6} berapa?
        id: Bilangan terkecil yang habis dibagi semua bilangan 1 sampai {n1}?
        id: Jam menunjukkan pukul 3.{n3}. Sudut antara jarum jam dan menitnya berapa?
        mx: {big} itu prima nggak sih?
    """),
    _task("logic_puzzle", True, None, """
        en: On an island, knights always tell the truth and knaves always lie. A says "B is a knave", B says "A and I are the same kind". What are they?
        en: Five houses in a row: the red one is left of the green one, the blue one is at an end, the yellow is in the middle, the white is next to the blue. Order?
        en: {name}, {name2} and {name3} each own one pet: a cat, a dog, a fish. {name} is allergic to fur, {name2} doesn't own the dog. Who owns what?
        en: A farmer must cross a river with a wolf, a goat and a cabbage; the boat holds one item. How?
        en: You have 8 balls, one heavier, and a balance. Fewest weighings to find it, and the procedure?
        en: Two doors, two guards, one lies and one tells the truth. One question to find the safe door?
        id: Di sebuah pulau, ksatria selalu jujur dan penipu selalu bohong. A bilang "B penipu", B bilang "aku dan A sejenis". Siapa apa?
        id: {name}, {name2}, dan {name3} masing-masing punya satu hewan: kucing, anjing, ikan. {name} alergi bulu, {name2} tidak punya anjing. Siapa punya apa?
        id: Petani harus menyeberangkan serigala, kambing, dan kubis; perahu hanya muat satu. Bagaimana caranya?
        id: Ada 8 bola, satu lebih berat, dan timbangan dua lengan. Paling sedikit berapa kali menimbang?
        id: Lima rumah berjajar: merah di kiri hijau, biru di ujung, kuning di tengah, putih di sebelah biru. Urutannya?
        id: Dua pintu dijaga dua penjaga, satu selalu bohong. Satu pertanyaan apa yang menjamin kita tahu pintu aman?
        mx: Ada puzzle: 3 saklar di luar, 1 lampu di dalam ruangan, cuma boleh masuk sekali. Gimana tau saklar yang mana?
    """),
    _task("debug", True, "trace", """
        en: This crashes in production but never locally. What's the root cause and how do I fix it properly?
        en: Why does this happen? I already checked the input isn't empty at the call site.
        en: We get this intermittently under load. Walk me through what could cause it and how to fix it.
        en: I've been stuck on this for hours. Find the bug.
        en: Here's the code and the error. What's wrong and what's the cleanest fix?
        en: Something is off here, tests pass but this shows up in the logs every few hours. Ideas?
        id: Ini crash di production tapi aman di lokal. Penyebab utamanya apa dan cara benerinnya gimana?
        id: Kenapa bisa begini? Input-nya sudah saya pastikan tidak kosong.
        id: Error ini muncul sesekali saat beban tinggi. Kira-kira penyebabnya apa dan solusinya?
        id: Sudah berjam-jam saya cari bug-nya nggak ketemu. Tolong dong.
        id: Ini kode dan error-nya. Salahnya di mana dan perbaikan yang paling bersih gimana?
        id: Tes lolos semua tapi log ini muncul tiap beberapa jam. Ada ide?
        mx: Tolong debug ini dong, kenapa error terus padahal logic-nya udah bener?
        mx: This keeps failing, aku udah coba restart service tapi tetep. Root cause-nya apa?
    """),
    _task("code_reasoning", True, "code", """
        en: Can this deadlock? If so, show the interleaving and fix it.
        en: What's the time complexity of this, and can it be done faster?
        en: There's a subtle bug in this. Find it and explain when it triggers.
        en: Is this thread-safe? Explain exactly what could go wrong.
        en: This returns the wrong result for some inputs. Which ones, and why?
        en: Review this for correctness under concurrent access and suggest a design that scales.
        id: Apakah kode ini bisa deadlock? Kalau iya, tunjukkan urutan kejadiannya dan perbaikannya.
        id: Kompleksitas waktunya berapa, dan bisa dibuat lebih cepat?
        id: Ada bug halus di sini. Temukan dan jelaskan kapan terjadinya.
        id: Ini aman dipakai banyak thread nggak? Jelaskan apa yang bisa salah.
        id: Hasilnya salah untuk input tertentu. Input yang mana dan kenapa?
        id: Review kebenarannya kalau diakses bersamaan, lalu usulkan desain yang lebih scalable.
        mx: Kenapa function ini kadang return hasil yang salah? Edge case-nya apa?
    """),
    _task("algorithm", True, None, """
        en: Design an algorithm to find the k most frequent words in a 50 GB log with 2 GB of RAM.
        en: Implement an LRU cache with O(1) get and put, and explain why it's O(1).
        en: Given a list of meetings with start and end times, find the minimum number of rooms. Code and complexity please.
        en: Write a function that returns the longest palindromic substring, better than O(n^3).
        en: How would you detect a cycle in a linked list using constant memory? Prove it works.
        en: Write a rate limiter that allows {n2} requests per minute per user across several servers.
        id: Rancang algoritma untuk mencari k kata paling sering dari log 50 GB dengan RAM 2 GB.
        id: Implementasikan LRU cache dengan get dan put O(1), jelaskan kenapa O(1).
        id: Diberikan daftar rapat dengan jam mulai dan selesai, cari jumlah ruangan minimum. Kode dan kompleksitasnya.
        id: Buat fungsi yang mencari substring palindrom terpanjang, lebih cepat dari O(n^3).
        id: Bagaimana mendeteksi siklus pada linked list dengan memori konstan? Buktikan benar.
        id: Buat rate limiter {n2} request per menit per pengguna yang jalan di beberapa server.
        mx: Gimana cara implement autocomplete yang cepat buat 10 juta kata? Jelasin struktur datanya.
    """),
    _task("planning", True, None, """
        en: Plan a 4-day trip to {city} and {city2} for two people on {n6} thousand rupiah total, no flights before 9am, and one day must be free for a wedding.
        en: I have five tasks: A takes 2 days, B 3 days and needs A, C 1 day, D needs B and C, E needs D. Two people. Shortest schedule?
        en: Schedule interviews for 6 candidates with 3 interviewers; each candidate sees two interviewers, nobody does more than 4, and {name} is only free in the afternoon.
        en: We must migrate our database with under 5 minutes of downtime, 2 TB of data and a replica that lags 30 s. Give me a step-by-step plan with rollback points.
        en: My flight lands at 14:50, the connection leaves at 16:05 from another terminal, the transfer takes 40 min and immigration up to 45. Should I risk it or rebook?
        en: Allocate a {n6} dollar marketing budget across search, social and events given last year's returns of 3x, 2x and 1.5x, with at least 20% on events.
        id: Rencanakan liburan 4 hari ke {city} dan {city2} untuk berdua dengan total {n6} ribu, tidak ada penerbangan sebelum jam 9, dan satu hari harus kosong untuk kondangan.
        id: Ada lima tugas: A 2 hari, B 3 hari dan butuh A, C 1 hari, D butuh B dan C, E butuh D. Ada dua orang. Jadwal tercepatnya?
        id: Atur jadwal wawancara 6 kandidat dengan 3 pewawancara; tiap kandidat ketemu dua pewawancara, tak ada yang lebih dari 4, dan {name} hanya bisa sore.
        id: Kami harus migrasi database 2 TB dengan downtime di bawah 5 menit dan replika tertinggal 30 detik. Buat rencana langkah demi langkah dengan titik rollback.
        id: Pesawat saya mendarat 14.50, sambungan berangkat 16.05 dari terminal lain, pindah terminal 40 menit, imigrasi bisa 45 menit. Nekat atau ganti jadwal?
        id: Bagi anggaran pemasaran {n6} ribu ke iklan search, sosmed, dan event dengan imbal hasil tahun lalu 3x, 2x, 1,5x, minimal 20% untuk event.
        mx: Bantu susun jadwal belajar 6 minggu buat ujian, ada 4 mata kuliah, weekend cuma bisa 3 jam. Prioritas yang paling berat dulu.
    """),
    _task("estimation", True, None, """
        en: Roughly how many piano tuners are there in Jakarta? Walk through your assumptions.
        en: Estimate how much storage a year of chat logs takes for an app with {n2} thousand daily users.
        en: How many litres of water does {city} use per day? Give an order-of-magnitude estimate with reasoning.
        en: Ballpark how many GPUs we'd need to serve {n5} requests per second of a 7B model.
        id: Kira-kira ada berapa tukang ojek di Jakarta? Jelaskan asumsimu.
        id: Perkirakan kapasitas penyimpanan log chat setahun untuk aplikasi dengan {n2} ribu pengguna harian.
        id: Berapa liter air dipakai kota {city} per hari? Perkiraan kasar dengan alasannya.
        id: Kira-kira butuh berapa GPU untuk melayani {n5} request per detik model 7B?
    """),
    _task("tradeoff", True, None, """
        en: We're choosing between Postgres and DynamoDB for an order system with strong consistency needs and spiky traffic. Weigh it and recommend one.
        en: Should we build our own auth or use a managed provider? Team of 4, B2B SaaS, SOC2 next year. Reason it through.
        en: Monorepo or polyrepo for 12 services and 3 teams? Consider CI time, ownership and releases.
        en: Is it worth rewriting our Python billing service in Go? It handles {n2} requests per second and the team knows Python.
        id: Kami memilih antara Postgres dan DynamoDB untuk sistem pesanan yang butuh konsistensi kuat dan trafik naik turun. Timbang dan rekomendasikan.
        id: Lebih baik bikin autentikasi sendiri atau pakai layanan terkelola? Tim 4 orang, SaaS B2B, audit tahun depan.
        id: Monorepo atau polyrepo untuk 12 layanan dan 3 tim? Pertimbangkan waktu CI, kepemilikan, dan rilis.
        id: Layak nggak menulis ulang layanan billing Python kami ke Go? Bebannya {n2} request per detik dan tim lebih paham Python.
        mx: Mending pakai Kafka atau RabbitMQ buat event sourcing kita? Pertimbangkan ordering dan replay.
    """),
    _task("doc_reasoning", True, "prose", """
        en: Based on this, if someone starts on the {day} and works only early shifts, how do their weekly hours change? Show the reasoning.
        en: Are there any contradictions or gaps in this text? Reason carefully.
        en: What are the likely second-order consequences of what's described here, and which is the biggest risk?
        en: Given this, would an employee who works from Bali for three weeks in two trips break the rules? Work through each condition.
        en: Which claims here are supported by the evidence given and which are not? Justify each.
        en: If we accepted every change requested here, what would our cash flow look like over the next quarter compared to now?
        id: Berdasarkan teks ini, kalau seseorang mulai tanggal {day} dan hanya ambil shift pagi, jam kerjanya per minggu berubah bagaimana? Jelaskan alasannya.
        id: Apakah ada kontradiksi atau celah dalam teks ini? Analisis dengan teliti.
        id: Apa dampak lanjutan yang mungkin terjadi dari hal ini, dan mana risiko terbesarnya?
        id: Dengan aturan ini, apakah karyawan yang kerja dari Bali tiga minggu dalam dua kali perjalanan melanggar? Periksa tiap syaratnya.
        id: Klaim mana di sini yang didukung bukti dan mana yang tidak? Beri alasan masing-masing.
        id: Kalau semua perubahan yang diminta di sini kita terima, arus kas kuartal depan jadi seperti apa dibanding sekarang?
        mx: Dari dokumen ini, kalau kita setuju semua request-nya, risk terbesar buat kita apa? Analisis step by step.
    """),
    _task("table_reasoning", True, "table", """
        en: Which row grew the most from the first to the last column in percentage terms, and is the trend consistent?
        en: Based on these numbers, what should we prioritise next quarter and why?
        en: Find the outlier here and explain whether it's likely a data error or a real effect.
        en: If each value grows by its average rate so far, which row overtakes which, and when?
        en: Compute the weighted average of the last column, weighted by the second, and tell me which rows pull it down most.
        id: Baris mana yang tumbuh paling besar dari kolom pertama ke terakhir dalam persen, dan apakah trennya konsisten?
        id: Berdasarkan angka-angka ini, apa yang harus jadi prioritas kuartal depan dan mengapa?
        id: Cari pencilannya dan jelaskan apakah itu kesalahan data atau efek nyata.
        id: Kalau tiap nilai tumbuh dengan laju rata-ratanya, baris mana yang menyalip baris lain dan kapan?
        id: Hitung rata-rata tertimbang kolom terakhir dengan bobot kolom kedua, lalu baris mana yang paling menurunkannya?
        mx: Dari data ini, which item harus di-reorder duluan dan kenapa? Hitung juga kapan stoknya habis.
    """),
    _task("tool_plan", True, "tools", """
        en: Find me the cheapest way to visit {city}, {city2} and Bali in any order next month, staying two nights each, and book a slot with {name} after I'm back.
        en: Which of our customers in {city} ordered more this quarter than last, and draft an email to the top three explaining the new loyalty tiers?
        en: Figure out why refunds spiked last week: check the orders, the tickets and the docs, then summarise the root cause.
        en: Plan a team offsite for 8 people in {city}: check everyone's calendar, the weather for candidate dates and flight prices, and propose the best date.
        id: Carikan cara termurah mengunjungi {city}, {city2}, dan Bali urutan bebas bulan depan, masing-masing dua malam, lalu jadwalkan ketemu {name} setelah pulang.
        id: Pelanggan mana di {city} yang ordernya kuartal ini lebih banyak dari kuartal lalu? Lalu buat draf email ke tiga teratas soal tingkat loyalitas baru.
        id: Cari tahu kenapa refund melonjak minggu lalu: cek pesanan, tiket, dan dokumentasi, lalu simpulkan penyebabnya.
        id: Rencanakan outing tim 8 orang di {city}: cek kalender semua orang, cuaca di tanggal kandidat, dan harga tiket, lalu usulkan tanggal terbaik.
    """),
    _task("json_reasoning", True, None, """
        en: Solve: a rectangle's perimeter is {n2} and its area is {n5}. Find its sides. Answer as {"sides": [...], "steps": [...]}.
        en: Decide whether {big} is prime and return {"prime": bool, "reason": str}.
        en: Schedule these: A(2h, before B), B(1h), C(3h, not after 15:00), start 9:00. Return {"schedule": [...]}.
        id: Keliling persegi panjang {n2} dan luasnya {n5}. Cari panjang sisinya. Jawab sebagai {"sisi": [...], "langkah": [...]}.
        id: Tentukan apakah {big} prima, kembalikan {"prima": bool, "alasan": str}.
        id: Jadwalkan: A(2 jam, sebelum B), B(1 jam), C(3 jam, tidak setelah 15.00), mulai 09.00. Kembalikan {"jadwal": [...]}.
    """, json_mode=True),
    _task("followup_heavy", True, "history", """
        en: OK, and what if the second train leaves 20 minutes later? Work it out again.
        en: Now prove it holds for every n, not just the examples.
        en: But why does that fix the race? Step through the interleaving.
        en: Fine, now do the same but with three people and the constraint that nobody works two days in a row.
        en: Hmm, your answer doesn't match mine (I got 0.42). Which of us is wrong and where?
        en: Now generalise it: what's the answer for n dice instead of two?
        id: Oke, kalau kereta kedua berangkat 20 menit lebih lambat gimana? Hitung ulang.
        id: Sekarang buktikan berlaku untuk semua n, bukan cuma contoh.
        id: Tapi kenapa itu memperbaiki race condition-nya? Uraikan urutan kejadiannya.
        id: Sekarang lakukan hal yang sama untuk tiga orang dengan syarat tidak ada yang kerja dua hari berturut-turut.
        id: Jawabanmu beda sama punyaku (aku dapat 0,42). Siapa yang salah dan di langkah mana?
        id: Sekarang buat umum: jawabannya untuk n dadu, bukan dua?
        mx: Wait, kalau constraint-nya diganti jadi maksimal 3 orang per ruangan, hasilnya berubah nggak? Hitung lagi.
    """),
    _task("heavy_in_chat", True, "chat", """
        en: Anyway, random brain teaser that's bugging me: if 5 machines make 5 widgets in 5 minutes, how long do 100 machines take for 100 widgets, and why do people get it wrong?
        en: So here's the thing: beach trip costs {n6} for 3 days, mountains {n5} for 4 days but needs a {n2} car rental. Per day per person for 3 of us, which is actually cheaper?
        en: Also my nephew asked me why you can't divide by zero and I couldn't prove it properly. Can you give a real argument?
        id: Btw ada teka-teki yang bikin penasaran: kalau 5 mesin bikin 5 barang dalam 5 menit, 100 mesin bikin 100 barang butuh berapa lama? Kenapa banyak yang salah?
        id: Jadi gini: ke pantai {n6} ribu untuk 3 hari, ke gunung {n5} ribu 4 hari tapi harus sewa mobil {n2} ribu. Per hari per orang untuk bertiga, mana yang lebih hemat?
        id: Terus keponakanku nanya kenapa nggak boleh bagi dengan nol dan aku nggak bisa jelasin dengan benar. Bisa kasih argumen yang beneran?
    """),
]

TASKS = LIGHT + HEAVY

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
