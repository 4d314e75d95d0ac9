package twicepg

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
)

// TestSQLEnqueueNameRuleParity runs a corpus of field names through the Go
// payload policy (twice.CheckArgsJSON with no fields) and twice_enqueue
// (a forced kind, so the name rule applies), and requires the same verdict
// for each. The corpus holds the tricky names of the root package's tests
// and, for every entry of the word table in argsnames.go (read from the
// source, so an entry added there and not in migration 019 fails here),
// its spellings: snake, camel, run together, plural, acronym, qualified,
// prefixed and suffixed.
func TestSQLEnqueueNameRuleParity(t *testing.T) {
	t.Parallel()
	s := newSQLSetup(t)
	ctx := t.Context()
	corpus := parityCorpus(t)
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	refused := 0
	for _, name := range corpus {
		raw, _ := json.Marshal(map[string]int{name: 1})
		goErr := twice.CheckArgsJSON("sqlenq.parity.v1", raw, nil, 0)
		if _, err := tx.Exec(ctx, `SAVEPOINT p`); err != nil {
			t.Fatal(err)
		}
		_, sqlErr := tx.Exec(ctx, `SELECT twice_enqueue('sqlenq.parity.v1', $1::jsonb, '{"force": true}')`, string(raw))
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT p`); err != nil {
			t.Fatal(err)
		}
		code, msg := sqlState(sqlErr)
		if sqlErr != nil && code != SQLStateSensitiveArgs {
			t.Errorf("%q: SQL error %v, want a verdict", name, sqlErr)
			continue
		}
		if (goErr != nil) != (sqlErr != nil) {
			t.Errorf("%q: Go says %v, SQL says %v", name, goErr, sqlErr)
			continue
		}
		if goErr != nil {
			refused++
			// The same entry is named: the message ends in it, quoted.
			if m := regexp.MustCompile(`\(("[^"]*")\)`).FindStringSubmatch(goErr.Error()); m == nil || !strings.Contains(msg, m[0]) {
				t.Errorf("%q: Go refuses with %q, SQL with %q", name, goErr, msg)
			}
		}
	}
	t.Logf("%d names, %d refused by both, %d allowed by both", len(corpus), refused, len(corpus)-refused)
	if refused < 100 || len(corpus)-refused < 50 {
		t.Fatalf("corpus of %d names has %d refused: too one-sided to prove parity", len(corpus), refused)
	}
}

// parityCorpus is TestSQLEnqueueNameRuleParity's corpus.
func parityCorpus(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("../argsnames.go")
	if err != nil {
		t.Fatal(err)
	}
	entries := regexp.MustCompile(`\{"([a-z ]+)", (?:secretData|personalData), (?:true|false)\}`).FindAllStringSubmatch(string(src), -1)
	if len(entries) < 50 {
		t.Fatalf("found %d entries in argsnames.go: has its table changed shape?", len(entries))
	}
	names := []string{
		// From the root package's TestSensitiveNames and TestNameWords.
		"Password", "ResetToken", "reset_token", "resettoken", "Tokens", "Pwd", "user_pwd", "ClientSecret", "clientsecret",
		"Credentials", "JWT", "JWTClaims", "jwt_claims", "OTP", "OTPCode", "PIN", "pin", "Pins", "AccessKey", "accesskey",
		"APIKey", "api_key", "apikey", "APIToken", "SessionCookie", "AuthHeader", "auth-header", "Authorization", "Bearer",
		"BearerValue", "CVV", "Email", "email_address", "EmailAddress", "e-mail", "Phone", "PhoneNumber", "Card",
		"CardNumber", "SSN", "IBAN", "FullName", "full_name", "fullname", "HomeAddress", "DOB", "DateOfBirth",
		"date_of_birth", "BirthDate", "UserName", "username", "user_name", "IPAddress", "ip_address", "ipaddress",
		"ClientIP", "FirstName", "Surname", "Passport", "NationalID", "TaxID",
		"EmailID", "email_id", "emailId", "CardID", "PhoneCallID", "TokenCount", "token_count", "PasswordLength",
		"EmailIDs", "TokenCounts", "AccessKeyID", "SessionID", "UserID", "PasswordResetID", "CardType",
		"DiscardAfter", "Wildcard", "Cardinality", "Pinned", "Spinner", "Shipping", "Zipped", "Tipping",
		"Domain", "Recipe", "Opinion", "Keyword", "Country", "Amount", "Cents", "OrderID", "Name", "Address", "Key",
		"Session", "Count", "ID", "", "userId", "user-id", "UserIDs", "HTTPServer2Port", "email.address",
		"apiToken", "email_id", "cardId", "token_count",
		// Boundaries: digits, acronyms, plurals' s, separators, qualifiers.
		"token2", "2fa_token", "OAuth2Token", "IPs", "IPS", "MACAddress", "mac_addr", "ipAddr", "ip_addrs", "PINs",
		"PINS", "pinsCount", "TokensSize", "token_sizes", "EmailKinds", "email_version", "emailTypeID", "id_email",
		"secret_id_token", "x", "s", "ids", "Ids", "tokenss", "emails", "E_Mail", "e.mail", "e mail", "E-MAIL",
		"ABCToken", "ABCs", "ABCsToken", "XMLHttpRequest", "myPinCode", "pinCodeCount", "lastNames", "LastNameID",
		"birthdayParty", "dateOfBirthday", "__password__", "pass word", "pass_word", "SocialSecurityNumber",
		"social_securities", "taxId", "tax_ids", "nationalIDs", "national_id_count", "card_holder", "creditCard",
		"creditcard", "cardsCount", "supersecret", "secretive", "tokenizer", "passwords_hash", "hashedPassword",
		"passphrases", "cookies_enabled", "cookieJar", "JWTs", "jwtsecret", "otpauth", "TOTPSeed", "Cvv2", "cvc_code",
		// Non-ASCII letters and digits.
		"ÉmailAddress", "emailé", "Straße", "пароль", "ТокенID", "phone١", "café_token", "ĲToken",
	}
	for _, e := range entries {
		words := strings.Fields(e[1])
		camel := ""
		for _, w := range words {
			camel += strings.ToUpper(w[:1]) + w[1:]
		}
		snake := strings.Join(words, "_")
		joined := strings.Join(words, "")
		names = append(names, snake, camel, joined, strings.ToUpper(joined), snake+"s", camel+"s", snake+"_id",
			camel+"ID", camel+"Count", snake+"_value", "my"+camel, "x"+joined, joined+"x", "x_"+snake, strings.Join(words, "-"),
			strings.ToUpper(snake), camel+"IDs", camel+"Type2")
	}
	return names
}
